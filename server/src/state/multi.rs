//! The `multi` family: several writes as one transaction, answered with one result per
//! operation (or, on failure, which operation failed and why), encoded as ZooKeeper does.

use tokio::time::Instant;

use crate::codec::{code, op, Id, WriteOp, Writer};

use super::txn::OpResult;
use super::{Reply, State};

impl State {
    /// Applies a `multi`, at `now` on the server's clock, and answers it.
    pub(super) fn multi(
        &mut self,
        session: i64,
        auth: Vec<Id>,
        xid: i32,
        ops: &[WriteOp],
        now: Instant,
    ) -> Reply {
        let outcome = self.transaction(session, auth, ops, true, now);
        let mut w = Writer::reply(xid, self.zxid, code::OK);
        match outcome {
            Ok(results) => {
                for result in results {
                    match result {
                        OpResult::Create { path, stat, opcode } => {
                            if opcode == op::CREATE {
                                w.i32(op::CREATE).bool(false).i32(0).string(&path);
                            } else {
                                w.i32(op::CREATE2)
                                    .bool(false)
                                    .i32(0)
                                    .string(&path)
                                    .stat(&stat);
                            }
                        }
                        OpResult::Delete => {
                            w.i32(op::DELETE).bool(false).i32(0);
                        }
                        OpResult::SetData(stat) | OpResult::SetAcl(stat) => {
                            w.i32(op::SET_DATA).bool(false).i32(0).stat(&stat);
                        }
                        OpResult::Check => {
                            w.i32(op::CHECK).bool(false).i32(0);
                        }
                    }
                }
            }
            Err((failed, err)) => {
                for i in 0..ops.len() {
                    let e = match i.cmp(&failed) {
                        std::cmp::Ordering::Less => code::OK,
                        std::cmp::Ordering::Equal => err,
                        std::cmp::Ordering::Greater => code::RUNTIME_INCONSISTENCY,
                    };
                    w.i32(op::ERROR).bool(false).i32(e).i32(e);
                }
            }
        }
        w.i32(-1).bool(true).i32(-1);
        Reply::Send(w.finish())
    }
}
