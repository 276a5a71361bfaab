//! Apache Curator programs for the interop suites: a Java source compiled
//! against Debian's `libcurator-recipes-java` (and the jars its ZooKeeper
//! client needs at run time), once per test program.

use std::path::Path;

use crate::backend::CURATOR_JAR;

/// Netty jars the ZooKeeper client's TLS socket (`ClientCnxnSocketNetty`)
/// needs beyond those `zookeeper.jar`'s manifest lists: `SslHandler` extends
/// netty-codec's `ByteToMessageDecoder`, and the client's `Bootstrap`
/// resolves addresses through netty-resolver. Harmless without TLS.
pub const NETTY_JARS: [&str; 2] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
];

/// A compiled Java program: its class directory (kept while this lives)
/// and the classpath to run it with.
#[derive(Debug)]
pub struct JavaProgram {
    /// The directory of the compiled classes.
    pub classes: tempfile::TempDir,
    /// The classpath for `java -cp`: the classes, Curator, a logger, Netty.
    pub classpath: String,
}

/// Compiles `source` (a `.java` file) against Curator's jars with `javac`.
/// The caller checks [`Prerequisite::Curator`](crate::backend::Prerequisite::Curator)
/// first.
///
/// # Panics
/// When `javac` cannot run or fails: a test's setup, said at once.
pub fn compile(source: &Path) -> JavaProgram {
    let classes = tempfile::tempdir().expect("a directory for the classes");
    let slf4j = [
        "/usr/share/java/slf4j-nop.jar",
        "/usr/share/java/slf4j-simple.jar",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .unwrap_or_default();
    let classpath = format!("{CURATOR_JAR}:{slf4j}:{}", NETTY_JARS.join(":"));
    let status = std::process::Command::new("javac")
        .args(["-cp", &classpath, "-d"])
        .arg(classes.path())
        .arg(source)
        .status()
        .expect("javac runs");
    assert!(status.success(), "javac failed on {}", source.display());
    let classpath = format!("{}:{classpath}", classes.path().display());
    JavaProgram { classes, classpath }
}
