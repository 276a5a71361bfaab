//! Where the ZooKeeper installation is: the `java` executable and the classpath of the
//! server's jars.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// Environment variable that, when set, replaces the whole Java classpath used for the server.
pub const CLASSPATH_ENV: &str = "ZOOKEEPER_CLASSPATH";

/// Where Debian's `zookeeper` package installs its jars.
const JAR_DIR: &str = "/usr/share/java";

/// Returns whether a ZooKeeper server can be launched here: `java` is found and the ZooKeeper
/// jars exist (or [`CLASSPATH_ENV`] is set).
///
/// Test suites can use it to skip, with a printed notice, when ZooKeeper is not installed.
pub fn zookeeper_available() -> bool {
    Installation::locate().is_ok()
}

/// The Java executable and classpath used to run the server.
#[derive(Clone, Debug)]
pub(crate) struct Installation {
    java: PathBuf,
    classpath: String,
}

impl Installation {
    pub(crate) fn locate() -> Result<Self, Error> {
        let java = find_java().ok_or_else(|| Error::ZooKeeperNotFound {
            missing: "`java` (neither $JAVA_HOME/bin/java nor java on PATH)".to_owned(),
        })?;
        let classpath = match std::env::var(CLASSPATH_ENV) {
            Ok(classpath) if !classpath.trim().is_empty() => classpath,
            _ => default_classpath()?,
        };
        Ok(Installation { java, classpath })
    }

    /// The `java` executable.
    pub(crate) fn java(&self) -> &Path {
        &self.java
    }

    /// The classpath to hand `java` with `-cp`.
    pub(crate) fn classpath(&self) -> &str {
        &self.classpath
    }
}

fn find_java() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let java = Path::new(&home).join("bin").join("java");
        if java.is_file() {
            return Some(java);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("java"))
        .find(|java| java.is_file())
}

/// `zookeeper.jar` names its dependencies (jute, netty, slf4j-api, ...) in its manifest
/// `Class-Path`, so only the jar itself and an slf4j binding are needed.
fn default_classpath() -> Result<String, Error> {
    let dir = Path::new(JAR_DIR);
    let mut entries = Vec::new();
    for jar in ["zookeeper.jar", "zookeeper-jute.jar"] {
        let path = dir.join(jar);
        if !path.is_file() {
            return Err(Error::ZooKeeperNotFound {
                missing: path.display().to_string(),
            });
        }
        if jar == "zookeeper.jar" {
            entries.push(path);
        }
    }
    // The manifest lists the Netty jars ZooKeeper names itself, but not netty-codec, which
    // netty-handler's SslHandler extends: without it the Netty connection factory binds its
    // TLS port and then fails every handshake (NoClassDefFoundError ByteToMessageDecoder).
    // Debian's libnetty-java, a dependency of `zookeeper`, ships it beside the others.
    let codec = dir.join("netty-codec.jar");
    if codec.is_file() {
        entries.push(codec);
    }
    // slf4j-simple writes the server log to stderr, which the wrapper appends to a file.
    if let Some(binding) = ["slf4j-simple.jar", "slf4j-nop.jar"]
        .iter()
        .map(|jar| dir.join(jar))
        .find(|path| path.is_file())
    {
        entries.push(binding);
    }
    let joined =
        std::env::join_paths(entries).map_err(|err| Error::InvalidConfig(err.to_string()))?;
    Ok(joined.to_string_lossy().into_owned())
}
