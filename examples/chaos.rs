//! The chaos run of `tests/chaos.rs`, for as long as you like: contenders
//! behind fault proxies take turns on every recipe while faults are
//! injected, then the figures and any violation are printed.
//!
//! ```sh
//! ZK_CHAOS_SECS=300 cargo run --release -p examples --example chaos
//! ZK_TEST_SERVER=real ZK_CHAOS_SECS=300 cargo run --release -p examples --example chaos
//! ```
//!
//! `ZK_CHAOS_SEED` replays a run; `ZK_CHAOS_BREAK=fence`, `=loss`,
//! `=observer` or `=bound` shows what happens without the fence, without
//! the loss signal, with an observer whose reports come late, or with stuck
//! holders whose progress a timer says. Exits with status 1 when a rule was
//! broken.

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = zk_curator_testing::TestingServer::start_async().await?;
    let config = zk_curator_chaos::Config::from_env(60);
    println!(
        "chaos: {:?} on the {:?} server, {} contenders, session timeout {:?}, seed {}",
        config.duration,
        server.backend(),
        config.contenders,
        config.session_timeout,
        config.seed
    );
    let report = zk_curator_chaos::run(&server, config).await;
    println!("{report}");
    let violations = report.violations();
    for violation in &violations {
        println!("VIOLATION: {violation}");
    }
    if violations.is_empty() {
        println!("no violation");
        Ok(())
    } else {
        std::process::exit(1)
    }
}
