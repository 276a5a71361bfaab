//! The identity and ACL family: `auth` (digest, super user), `whoAmI`, `getACL`.

use tracing::debug;

use crate::acl::{self, perms};
use crate::codec::{code, Acl, AuthRequest, Id, Writer};
use crate::watch::ConnId;

use super::{error_reply, Reply, State};

impl State {
    /// Answers an identity or ACL request of `conn` (identities `auth`).
    pub(super) fn auth_request(
        &mut self,
        conn: ConnId,
        xid: i32,
        request: AuthRequest,
        auth: &[Id],
    ) -> Reply {
        match request {
            AuthRequest::Auth { scheme, auth } => self.auth(conn, xid, &scheme, &auth),
            AuthRequest::WhoAmI => {
                let mut w = Writer::reply(xid, self.zxid, code::OK);
                w.i32(i32::try_from(auth.len()).unwrap_or(0));
                for id in auth {
                    let user = if id.scheme == "digest" {
                        id.id.split(':').next().unwrap_or_default()
                    } else {
                        id.id.as_str()
                    };
                    w.string(&id.scheme).string(user);
                }
                Reply::Send(w.finish())
            }
            AuthRequest::GetAcl(path) => self.get_acl(xid, &path, auth),
        }
    }

    fn get_acl(&self, xid: i32, path: &str, auth: &[Id]) -> Reply {
        let Some(node) = self.tree.get(path) else {
            return Reply::Send(error_reply(xid, self.zxid, code::NO_NODE));
        };
        if !acl::allowed(&node.acl, perms::READ | perms::ADMIN, auth) {
            return Reply::Send(error_reply(xid, self.zxid, code::NO_AUTH));
        }
        // Without ADMIN, digest ids are shown without their password hash.
        let admin = acl::allowed(&node.acl, perms::ADMIN, auth);
        let acls: Vec<Acl> = node
            .acl
            .iter()
            .map(|a| {
                if !admin && a.id.scheme == "digest" {
                    let user = a.id.id.split(':').next().unwrap_or_default();
                    Acl {
                        perms: a.perms,
                        id: Id {
                            scheme: a.id.scheme.clone(),
                            id: format!("{user}:x"),
                        },
                    }
                } else {
                    a.clone()
                }
            })
            .collect();
        let mut w = Writer::reply(xid, self.zxid, code::OK);
        w.acls(&acls).stat(&node.stat());
        Reply::Send(w.finish())
    }

    fn auth(&mut self, conn: ConnId, xid: i32, scheme: &str, credentials: &[u8]) -> Reply {
        let id = match scheme {
            "digest" => Id {
                scheme: "digest".to_owned(),
                id: acl::digest_id(credentials),
            },
            _ => {
                debug!(conn, scheme, "unsupported auth scheme");
                return Reply::SendAndClose(error_reply(xid, 0, code::AUTH_FAILED));
            }
        };
        let is_super = self.limits.super_digest.as_deref() == Some(id.id.as_str());
        if let Some(c) = self.conns.get_mut(&conn) {
            if is_super {
                let super_id = Id {
                    scheme: "super".to_owned(),
                    id: String::new(),
                };
                if !c.auth.contains(&super_id) {
                    c.auth.push(super_id);
                }
            }
            if !c.auth.contains(&id) {
                c.auth.push(id);
            }
        }
        Reply::Send(error_reply(xid, 0, code::OK))
    }
}
