//! What one connection does on an ensemble's member, for `connection`, which calls in here
//! when its server has a [`Seat`]: the session handshake (a new global session made by a
//! transaction, a local one on the member at once, a client that has seen a later zxid
//! refused), each request (writes and `closeSession` sent to the leader and answered once
//! this member has applied them, `sync` once it has caught up, the rest from its own
//! state), and the [`Wait`] that holds up the connection's next request meanwhile. See the
//! ensemble's module docs (`super`) for what it models.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use super::replication::Seat;
use crate::codec::{self, code, op, ConnectRequest, ReadRequest, Request, SessionRequest, WriteOp};
use crate::outbox::Outbox;
use crate::shared::Shared;
use crate::state::Applied;
use crate::watch::ConnId;

/// What a member's connection waits for before it takes its next request.
#[derive(Debug)]
pub(crate) struct Wait {
    told: oneshot::Receiver<()>,
    then: Then,
}

/// What a connection does once its wait is over.
#[derive(Debug)]
enum Then {
    /// Nothing more (the reply was queued when the member applied the write).
    Nothing,
    /// Answers this request (a `sync`) now.
    Answer {
        xid: i32,
        opcode: i32,
        request: Request,
    },
    /// Binds the new session now (its creation was applied).
    Bind { id: i64, timeout: Duration },
    /// Takes this request now: it waited for writes of its session still in flight from
    /// this member, sent on a connection the client has left.
    Again {
        xid: i32,
        opcode: i32,
        request: Result<Request, codec::DecodeError>,
    },
}

/// How a wait ended, for the connection.
#[derive(Debug)]
pub(crate) enum Completed {
    /// Take the next request.
    Next,
    /// The session is established.
    Established,
    /// Close the connection.
    Close,
    /// Wait for this before the next request.
    Wait(Wait),
}

/// Waits for the connection's wait, if any, to end; whether it ended as planned (not
/// dropped: the member stopped serving).
pub(crate) async fn finished(waiting: &mut Option<Wait>) -> bool {
    match waiting {
        Some(wait) => (&mut wait.told).await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Does what a connection's wait left to do; `told` says whether it ended as planned.
pub(crate) fn complete(
    wait: Wait,
    told: bool,
    conn: ConnId,
    shared: &Shared,
    tx: &Outbox,
) -> Completed {
    if !told {
        tx.close();
        return Completed::Close;
    }
    let now = Instant::now();
    match wait.then {
        Then::Nothing => Completed::Next,
        Then::Answer {
            xid,
            opcode,
            request,
        } => {
            let mut state = shared.state();
            let reply = state.request(conn, xid, opcode, Ok(request), now);
            if reply.queue_on(tx) {
                Completed::Close
            } else {
                Completed::Next
            }
        }
        Then::Again {
            xid,
            opcode,
            request: again,
        } => {
            let Some(seat) = shared.seat.get() else {
                tx.close();
                return Completed::Close;
            };
            match request(seat, shared, conn, xid, opcode, again, tx) {
                (true, _) => Completed::Close,
                (false, Some(wait)) => Completed::Wait(wait),
                (false, None) => Completed::Next,
            }
        }
        Then::Bind { id, timeout } => {
            let mut state = shared.state();
            if state.sessions.get(id).is_none() {
                tx.close();
                return Completed::Close;
            }
            tx.frame(state.bind_new(conn, id, timeout, now));
            Completed::Established
        }
    }
}

/// How a member answered a handshake.
#[derive(Debug)]
pub(crate) enum Handshake {
    /// Close without an answer (not serving, or the client has seen a later zxid).
    Refuse,
    /// Answered (queued): whether the session is established.
    Answered(bool),
    /// Answered once the wait is over.
    Wait(Wait),
}

/// A handshake on a member (its answer queued on `tx` under the state lock).
pub(crate) fn handshake(
    seat: &Seat,
    shared: &Shared,
    conn: ConnId,
    request: &ConnectRequest,
    tx: &Outbox,
) -> Handshake {
    let now = Instant::now();
    let m = seat.index;
    let mut state = shared.state();
    let mut core = seat.inner.core();
    if !core.members[m].serving {
        return Handshake::Refuse;
    }
    if request.last_zxid_seen > state.zxid {
        debug!(
            member = m,
            conn,
            client_zxid = format_args!("{:#x}", request.last_zxid_seen),
            zxid = format_args!("{:#x}", state.zxid),
            "client has seen a newer zxid than this member; refusing"
        );
        return Handshake::Refuse;
    }
    let limits = &shared.settings;
    let requested = Duration::from_millis(u64::try_from(request.timeout).unwrap_or(0));
    let timeout = requested
        .max(limits.min_session_timeout)
        .min(limits.max_session_timeout);
    if request.session_id == 0 {
        let id = core.sessions.create(timeout, conn, now.into_std());
        if core.local_sessions {
            core.sessions.remove(id);
            core.local.insert(id, m);
            drop(core);
            tx.frame(state.bind_new(conn, id, timeout, now));
            return Handshake::Answered(true);
        }
        let told = core.send(
            m,
            Some((conn, 0)),
            Applied::CreateSession { id, timeout },
            now,
        );
        drop(core);
        seat.inner.ring();
        return Handshake::Wait(Wait {
            told,
            then: Then::Bind { id, timeout },
        });
    }
    let id = request.session_id;
    let known = match core.local.get(&id) {
        Some(&owner) => owner == m && state.sessions.get(id).is_some(),
        None => core.sessions.get(id).is_some(),
    };
    if !known || request.password != core.sessions.password(id) {
        debug!(
            member = m,
            conn,
            session = format_args!("{id:#x}"),
            "invalid or expired session"
        );
        tx.frame(codec::connect_response(0, 0, &[0; 16]));
        tx.close();
        return Handshake::Answered(false);
    }
    let kept = core.sessions.get(id).map_or(timeout, |s| s.timeout);
    if core.reaches_leader(m) {
        // Revalidated through the leader: the session is this member's from now on.
        core.sessions.touch(id, now.into_std());
        if !core.local.contains_key(&id) {
            core.owners.insert(id, m);
        }
    }
    drop(core);
    state.adopt_session(id, kept, now);
    match state.handshake(conn, request, now) {
        None => Handshake::Refuse,
        Some((frame, valid)) => {
            tx.frame(frame);
            if !valid {
                tx.close();
            }
            Handshake::Answered(valid)
        }
    }
}

/// Whether a request creates an ephemeral node (which makes a local session global).
fn creates_ephemeral(request: &Request) -> bool {
    let ephemeral = |op: &WriteOp| {
        matches!(op, WriteOp::Create(c)
            if matches!(c.flags, 1 | 3) && matches!(c.opcode, op::CREATE | op::CREATE2))
    };
    match request {
        Request::Write(w) => ephemeral(w),
        Request::Multi(ops) => ops.iter().any(ephemeral),
        _ => false,
    }
}

/// A request on a member's established connection: writes (and `closeSession`) go to the
/// leader and are answered once applied here, `sync` once this member has caught up with
/// what the leader had committed, the rest from this member's own state. Returns whether
/// the connection is closing, and what it waits for first if anything.
pub(crate) fn request(
    seat: &Seat,
    shared: &Shared,
    conn: ConnId,
    xid: i32,
    opcode: i32,
    request: Result<Request, codec::DecodeError>,
    tx: &Outbox,
) -> (bool, Option<Wait>) {
    let now = Instant::now();
    let m = seat.index;
    let mut state = shared.state();
    let session = state.session_of(conn).unwrap_or(0);
    if session != 0 {
        let mut core = seat.inner.core();
        if core.reaches_leader(m) && core.sessions.get(session).is_some() {
            core.sessions.touch(session, now.into_std());
        }
        // A session's requests are taken in order on a member, whatever connection they
        // came on (ZooKeeper's commit processor holds a session's next request until its
        // writes before are applied): a client back on this member after its connection
        // died waits for the writes it sent on that one. Else its first read may miss a
        // node it made, and it makes another.
        if core.in_flight(m, session) {
            let (tell, told) = oneshot::channel();
            core.members[m].session_waits.push((session, tell));
            return (
                false,
                Some(Wait {
                    told,
                    then: Then::Again {
                        xid,
                        opcode,
                        request,
                    },
                }),
            );
        }
    }
    let routed = matches!(
        request,
        Ok(Request::Write(_)
            | Request::Multi(_)
            | Request::Session(SessionRequest::Close | SessionRequest::Reconfig)
            | Request::Read(ReadRequest::Sync(_)))
    );
    if session == 0 || !routed {
        let reply = state.request(conn, xid, opcode, request, now);
        return (reply.queue_on(tx), None);
    }
    let Ok(request) = request else {
        return (false, None);
    };
    if !state.sessions.touch(session, now.into_std()) {
        let reply = codec::Writer::reply(xid, state.zxid, code::SESSION_EXPIRED).finish();
        tx.frame(reply);
        tx.close();
        return (true, None);
    }
    if let Request::Session(SessionRequest::Reconfig) = request {
        return (state.refuse_reconfig(xid).queue_on(tx), None);
    }
    let mut core = seat.inner.core();
    if let Request::Read(ReadRequest::Sync(_)) = request {
        let (tell, told) = oneshot::channel();
        let target = core.reaches_leader(m).then_some(core.commit);
        core.members[m].syncs.push((target, tell));
        drop(core);
        seat.inner.ring();
        return (
            false,
            Some(Wait {
                told,
                then: Then::Answer {
                    xid,
                    opcode,
                    request,
                },
            }),
        );
    }
    let local = core.local.get(&session) == Some(&m);
    if local && matches!(request, Request::Session(SessionRequest::Close)) {
        core.local.remove(&session);
        drop(core);
        tx.frame(codec::Writer::reply(xid, state.zxid, code::OK).finish());
        state.sessions.remove(session);
        tx.close();
        return (true, None);
    }
    if local && creates_ephemeral(&request) {
        // Upgraded: made global by a transaction of its own, before the write.
        let timeout = state
            .sessions
            .get(session)
            .map_or(Duration::from_secs(10), |s| s.timeout);
        core.local.remove(&session);
        core.sessions.adopt(session, timeout, now.into_std());
        if core.reaches_leader(m) {
            core.propose(
                m,
                None,
                Applied::CreateSession {
                    id: session,
                    timeout,
                },
                None,
                now,
            );
        } else {
            core.members[m].forward.push((
                None,
                Applied::CreateSession {
                    id: session,
                    timeout,
                },
                None,
            ));
        }
    }
    let path = request.path().map(str::to_owned);
    if !matches!(request, Request::Session(_)) {
        if let Some(armed) = shared.faults.take_if_matches(opcode, path.as_deref()) {
            core.lost.insert((m, conn, xid), (armed, opcode, path));
        }
    }
    let auth = state.auth_of(conn);
    let told = core.send(
        m,
        Some((conn, xid)),
        Applied::Request {
            session,
            auth,
            request,
        },
        now,
    );
    drop(core);
    seat.inner.ring();
    (
        false,
        Some(Wait {
            told,
            then: Then::Nothing,
        }),
    )
}
