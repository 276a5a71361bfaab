//! `zk-curator revoke`: asks holders to give their lock up, with
//! [`Revoker::attempt_revoke`] (Curator's `__REVOKE__` protocol).

use zk_curator::framework::path::join;
use zk_curator::{Framework, Revoker};

use crate::exit::Failure;
use crate::layout::{participants, Role};
use crate::RevokeArgs;

/// Writes the revocation request into the chosen nodes and prints how many
/// were asked.
pub(crate) async fn run(framework: &Framework, args: &RevokeArgs) -> Result<u8, Failure> {
    let targets: Vec<String> = match &args.node {
        // A full path is taken as it is; a bare name is a child of the lock.
        Some(node) if node.starts_with('/') => vec![node.clone()],
        Some(node) => {
            // The semaphore's lease nodes live one level down.
            let found = participants(framework, &args.path, None).await?;
            match found.iter().find(|p| &p.name == node) {
                Some(p) => vec![p.node.clone()],
                None => vec![join(&args.path, node)],
            }
        }
        None => participants(framework, &args.path, None)
            .await?
            .into_iter()
            .filter(|p| p.role == Role::Holder)
            .map(|p| p.node)
            .collect(),
    };
    for node in &targets {
        Revoker::attempt_revoke(framework, node)
            .await
            .map_err(|err| Failure::zk(format!("cannot revoke {node}"), err))?;
        tracing::info!(%node, "revocation requested");
    }
    let plural = if targets.len() == 1 { "" } else { "s" };
    println!("asked {} holder{plural} to release", targets.len());
    Ok(0)
}
