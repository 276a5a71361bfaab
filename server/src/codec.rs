//! Jute, ZooKeeper's binary record format, as far as the client protocol needs it.
//!
//! Everything is big-endian: `int` is an `i32`, `long` an `i64`, `boolean` one byte, `buffer`
//! and `ustring` an `i32` length followed by that many bytes (`-1` for null), `vector` an `i32`
//! count followed by the items. Every packet travels in a frame: an `i32` length, then the bytes.
//!
//! The reader never panics and never allocates more than the input it was given: every length is
//! checked against the bytes that are actually left before anything is copied.

use std::fmt;

/// ZooKeeper's opcodes (the `type` of a request header).
pub mod op {
    /// Watch notification (only in multi headers as `0`), never sent by clients.
    pub const NOTIFICATION: i32 = 0;
    /// `create`.
    pub const CREATE: i32 = 1;
    /// `delete`.
    pub const DELETE: i32 = 2;
    /// `exists`.
    pub const EXISTS: i32 = 3;
    /// `getData`.
    pub const GET_DATA: i32 = 4;
    /// `setData`.
    pub const SET_DATA: i32 = 5;
    /// `getACL`.
    pub const GET_ACL: i32 = 6;
    /// `setACL`.
    pub const SET_ACL: i32 = 7;
    /// `getChildren`.
    pub const GET_CHILDREN: i32 = 8;
    /// `sync`.
    pub const SYNC: i32 = 9;
    /// `ping`.
    pub const PING: i32 = 11;
    /// `getChildren2`.
    pub const GET_CHILDREN2: i32 = 12;
    /// `check` (version check).
    pub const CHECK: i32 = 13;
    /// `multi`.
    pub const MULTI: i32 = 14;
    /// `create2`.
    pub const CREATE2: i32 = 15;
    /// `reconfig`.
    pub const RECONFIG: i32 = 16;
    /// `checkWatches`.
    pub const CHECK_WATCHES: i32 = 17;
    /// `removeWatches`.
    pub const REMOVE_WATCHES: i32 = 18;
    /// `createContainer`.
    pub const CREATE_CONTAINER: i32 = 19;
    /// `deleteContainer`.
    pub const DELETE_CONTAINER: i32 = 20;
    /// `createTTL`.
    pub const CREATE_TTL: i32 = 21;
    /// `multiRead`.
    pub const MULTI_READ: i32 = 22;
    /// `auth`.
    pub const AUTH: i32 = 100;
    /// `setWatches`.
    pub const SET_WATCHES: i32 = 101;
    /// `sasl`.
    pub const SASL: i32 = 102;
    /// `getEphemerals`.
    pub const GET_EPHEMERALS: i32 = 103;
    /// `getAllChildrenNumber`.
    pub const GET_ALL_CHILDREN_NUMBER: i32 = 104;
    /// `setWatches2`.
    pub const SET_WATCHES2: i32 = 105;
    /// `addWatch`.
    pub const ADD_WATCH: i32 = 106;
    /// `whoAmI`.
    pub const WHO_AM_I: i32 = 107;
    /// `closeSession`.
    pub const CLOSE_SESSION: i32 = -11;
    /// `error` (a failed operation inside a multi reply).
    pub const ERROR: i32 = -1;
}

/// ZooKeeper's error codes (the `err` of a reply header).
pub mod code {
    /// Success.
    pub const OK: i32 = 0;
    /// An operation of a failed multi that comes after the failing one.
    pub const RUNTIME_INCONSISTENCY: i32 = -2;
    /// The request could not be decoded.
    pub const MARSHALLING_ERROR: i32 = -5;
    /// Unknown operation.
    pub const UNIMPLEMENTED: i32 = -6;
    /// Invalid arguments (bad path, bad flags, bad TTL).
    pub const BAD_ARGUMENTS: i32 = -8;
    /// The node does not exist.
    pub const NO_NODE: i32 = -101;
    /// Not authorised by the node's ACL.
    pub const NO_AUTH: i32 = -102;
    /// Version mismatch.
    pub const BAD_VERSION: i32 = -103;
    /// Ephemeral nodes cannot have children.
    pub const NO_CHILDREN_FOR_EPHEMERALS: i32 = -108;
    /// The node exists already.
    pub const NODE_EXISTS: i32 = -110;
    /// The node has children.
    pub const NOT_EMPTY: i32 = -111;
    /// The session expired.
    pub const SESSION_EXPIRED: i32 = -112;
    /// Invalid ACL.
    pub const INVALID_ACL: i32 = -114;
    /// Authentication failed.
    pub const AUTH_FAILED: i32 = -115;
    /// No such watcher.
    pub const NO_WATCHER: i32 = -121;
    /// Reconfiguration is disabled.
    pub const RECONFIG_DISABLED: i32 = -123;
}

/// Special xids of server-initiated frames.
pub mod xid {
    /// Watch notification.
    pub const NOTIFICATION: i32 = -1;
    /// Ping reply.
    pub const PING: i32 = -2;
}

/// Largest frame (and largest buffer) accepted, like ZooKeeper's default `jute.maxbuffer`.
pub const MAX_PACKET: usize = 0xfffff;

/// One whole frame cut off the front of a stream by [`next_frame`]: its `i32` length, then
/// its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    bytes: Vec<u8>,
}

impl Frame {
    /// The body: what follows the length.
    pub fn body(&self) -> &[u8] {
        &self.bytes[4..]
    }

    /// The whole frame as it was read, its length first.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// What the front of a stream of frames holds; see [`next_frame`].
#[derive(Debug, PartialEq, Eq)]
pub enum Framed {
    /// Not a whole frame yet.
    Incomplete,
    /// A four-letter-word command (only when [`next_frame`] is asked to look for one).
    FourLetter([u8; 4]),
    /// A length that is negative or above the largest one accepted.
    TooLong(i32),
    /// One whole frame.
    Frame(Frame),
}

/// Cuts the next frame off the front of `pending`, the bytes read so far; a frame whose
/// length is negative or above `max_len` is [`TooLong`](Framed::TooLong), and nothing is cut
/// until a whole frame is there.
///
/// With `four_letter_words`, four lowercase ASCII letters at the front are a command such as
/// `ruok` ([`FourLetter`](Framed::FourLetter), nothing cut), as ZooKeeper reads them on a
/// connection before its handshake (such a length would be above any `max_len` that fits in
/// memory).
pub fn next_frame(pending: &mut Vec<u8>, max_len: usize, four_letter_words: bool) -> Framed {
    let Some(head) = pending.get(..4) else {
        return Framed::Incomplete;
    };
    let word = [head[0], head[1], head[2], head[3]];
    if four_letter_words && word.iter().all(u8::is_ascii_lowercase) {
        return Framed::FourLetter(word);
    }
    let len = i32::from_be_bytes(word);
    let Ok(size) = usize::try_from(len) else {
        return Framed::TooLong(len);
    };
    if size > max_len {
        return Framed::TooLong(len);
    }
    if pending.len() < 4 + size {
        return Framed::Incomplete;
    }
    let rest = pending.split_off(4 + size);
    let bytes = std::mem::replace(pending, rest);
    Framed::Frame(Frame { bytes })
}

/// Why bytes could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The record ended before all its fields were read.
    Truncated,
    /// A length or count was negative (other than `-1` for null) or too large.
    BadLength,
    /// A string was not UTF-8, or a required string was null.
    BadString,
    /// A boolean byte was neither 0 nor 1, or an operation type is not allowed here.
    BadValue,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            DecodeError::Truncated => "record truncated",
            DecodeError::BadLength => "invalid length",
            DecodeError::BadString => "invalid string",
            DecodeError::BadValue => "invalid value",
        };
        f.write_str(what)
    }
}

/// Result of decoding.
pub type Decoded<T> = Result<T, DecodeError>;

/// Reads jute fields from a byte slice.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads from the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::BadLength)?;
        let bytes = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    /// Reads an `int`.
    pub fn i32(&mut self) -> Decoded<i32> {
        let raw = self.take(4)?;
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(raw);
        Ok(i32::from_be_bytes(bytes))
    }

    /// Reads a `long`.
    pub fn i64(&mut self) -> Decoded<i64> {
        let raw = self.take(8)?;
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(raw);
        Ok(i64::from_be_bytes(bytes))
    }

    /// Reads a `boolean` (jute writes 0 or 1; any non-zero byte reads as true, as in Java).
    pub fn bool(&mut self) -> Decoded<bool> {
        Ok(self.take(1)?[0] != 0)
    }

    /// Reads a `buffer`; `None` for null.
    pub fn buffer(&mut self) -> Decoded<Option<Vec<u8>>> {
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| DecodeError::BadLength)?;
        if len > MAX_PACKET {
            return Err(DecodeError::BadLength);
        }
        Ok(Some(self.take(len)?.to_vec()))
    }

    /// Reads a `buffer`, null read as empty.
    pub fn data(&mut self) -> Decoded<Vec<u8>> {
        Ok(self.buffer()?.unwrap_or_default())
    }

    /// Reads a `ustring`; `None` for null.
    pub fn opt_string(&mut self) -> Decoded<Option<String>> {
        match self.buffer()? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| DecodeError::BadString),
        }
    }

    /// Reads a non-null `ustring`.
    pub fn string(&mut self) -> Decoded<String> {
        self.opt_string()?.ok_or(DecodeError::BadString)
    }

    /// Reads a vector count; `-1` (null) reads as 0.
    fn count(&mut self) -> Decoded<usize> {
        let n = self.i32()?;
        if n == -1 {
            return Ok(0);
        }
        let n = usize::try_from(n).map_err(|_| DecodeError::BadLength)?;
        // Every item takes at least one byte: a count beyond the rest is a lie.
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        Ok(n)
    }

    /// Reads a `vector<ustring>`.
    pub fn strings(&mut self) -> Decoded<Vec<String>> {
        let n = self.count()?;
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(self.string()?);
        }
        Ok(out)
    }

    /// Reads a `vector<ACL>`.
    pub fn acls(&mut self) -> Decoded<Vec<Acl>> {
        let n = self.count()?;
        let mut out = Vec::new();
        for _ in 0..n {
            let perms = self.i32()?;
            let scheme = self.string()?;
            // A null id is accepted as ZooKeeper accepts it (kazoo sends one with the `auth`
            // scheme, whose id is ignored); it reads as empty.
            let id = self.opt_string()?.unwrap_or_default();
            out.push(Acl {
                perms,
                id: Id { scheme, id },
            });
        }
        Ok(out)
    }
}

/// Writes jute fields into a byte vector.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Starts a frame: reserves the length prefix, filled in by [`finish`](Self::finish).
    pub fn frame() -> Self {
        Writer { buf: vec![0; 4] }
    }

    /// Starts a frame with a reply header.
    pub fn reply(xid: i32, zxid: i64, err: i32) -> Self {
        let mut w = Writer::frame();
        w.i32(xid).i64(zxid).i32(err);
        w
    }

    /// Completes a frame started with [`frame`](Self::frame) and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        while self.buf.len() < 4 {
            self.buf.push(0);
        }
        let len = i32::try_from(self.buf.len() - 4).unwrap_or(i32::MAX);
        self.buf[..4].copy_from_slice(&len.to_be_bytes());
        self.buf
    }

    /// Appends bytes as they are.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self
    }

    /// The bytes written so far (for a writer not started with [`frame`](Self::frame)).
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Writes an `int`.
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Writes a `long`.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Writes a `boolean`.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.buf.push(u8::from(v));
        self
    }

    /// Writes a non-null `buffer`.
    pub fn buffer(&mut self, v: &[u8]) -> &mut Self {
        self.i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
        self.buf.extend_from_slice(v);
        self
    }

    /// Writes a `buffer` that may be null (length -1).
    pub fn opt_buffer(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            Some(bytes) => self.buffer(bytes),
            None => self.i32(-1),
        }
    }

    /// Writes a `ustring`.
    pub fn string(&mut self, v: &str) -> &mut Self {
        self.buffer(v.as_bytes())
    }

    /// Writes a `vector<ustring>`.
    pub fn strings<S: AsRef<str>>(&mut self, v: &[S]) -> &mut Self {
        self.i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
        for s in v {
            self.string(s.as_ref());
        }
        self
    }

    /// Writes a `vector<ACL>`.
    pub fn acls(&mut self, v: &[Acl]) -> &mut Self {
        self.i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
        for acl in v {
            self.i32(acl.perms)
                .string(&acl.id.scheme)
                .string(&acl.id.id);
        }
        self
    }

    /// Writes a `Stat`.
    pub fn stat(&mut self, s: &Stat) -> &mut Self {
        self.i64(s.czxid)
            .i64(s.mzxid)
            .i64(s.ctime)
            .i64(s.mtime)
            .i32(s.version)
            .i32(s.cversion)
            .i32(s.aversion)
            .i64(s.ephemeral_owner)
            .i32(s.data_length)
            .i32(s.num_children)
            .i64(s.pzxid)
    }
}

/// An identity: `scheme:id`, e.g. `world:anyone` or `digest:user:base64(sha1)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Id {
    /// The scheme (`world`, `digest`, `ip`, `auth`, `super`).
    pub scheme: String,
    /// The id within the scheme.
    pub id: String,
}

/// One entry of a node's access control list.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Acl {
    /// Permission bits (read 1, write 2, create 4, delete 8, admin 16).
    pub perms: i32,
    /// Who gets them.
    pub id: Id,
}

/// A node's metadata as clients see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Zxid of the creation.
    pub czxid: i64,
    /// Zxid of the last data change.
    pub mzxid: i64,
    /// Creation time, ms since the epoch.
    pub ctime: i64,
    /// Last data change time, ms since the epoch.
    pub mtime: i64,
    /// Data version.
    pub version: i32,
    /// Children version.
    pub cversion: i32,
    /// ACL version.
    pub aversion: i32,
    /// Owning session of an ephemeral node, else 0.
    pub ephemeral_owner: i64,
    /// Length of the data.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
    /// Zxid of the last change of the children.
    pub pzxid: i64,
}

/// The session handshake a client sends first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Protocol version (0).
    pub protocol_version: i32,
    /// Last zxid the client has seen.
    pub last_zxid_seen: i64,
    /// Requested session timeout in ms.
    pub timeout: i32,
    /// Session to re-attach to, or 0 for a new one.
    pub session_id: i64,
    /// The session's password (empty for a new session).
    pub password: Vec<u8>,
    /// Whether the client accepts a read-only server.
    pub read_only: bool,
}

impl ConnectRequest {
    /// Decodes a handshake body; `readOnly` is optional, as old clients omit it.
    pub fn decode(body: &[u8]) -> Decoded<Self> {
        let mut r = Reader::new(body);
        let protocol_version = r.i32()?;
        let last_zxid_seen = r.i64()?;
        let timeout = r.i32()?;
        let session_id = r.i64()?;
        let password = r.data()?;
        let read_only = if r.remaining() > 0 { r.bool()? } else { false };
        Ok(ConnectRequest {
            protocol_version,
            last_zxid_seen,
            timeout,
            session_id,
            password,
            read_only,
        })
    }
}

/// Encodes the handshake answer as a frame.
pub fn connect_response(timeout: i32, session_id: i64, password: &[u8]) -> Vec<u8> {
    let mut w = Writer::frame();
    w.i32(0)
        .i32(timeout)
        .i64(session_id)
        .buffer(password)
        .bool(false);
    w.finish()
}

/// A create of any kind (`create`, `create2`, `createContainer`, `createTTL`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateOp {
    /// The opcode it came with.
    pub opcode: i32,
    /// Requested path (before any sequence suffix).
    pub path: String,
    /// Initial data; `None` for a null buffer (kept as null, as ZooKeeper does).
    pub data: Option<Vec<u8>>,
    /// Requested ACL.
    pub acl: Vec<Acl>,
    /// Create mode flags.
    pub flags: i32,
    /// Time to live in ms, `-1` when the request has none.
    pub ttl: i64,
}

/// One write operation (alone or inside a multi).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOp {
    /// Create a node.
    Create(CreateOp),
    /// Delete a node (`deleteContainer` when `container`).
    Delete {
        /// The node.
        path: String,
        /// Expected version, -1 for any.
        version: i32,
        /// Whether it is a `deleteContainer`.
        container: bool,
    },
    /// Write a node's data.
    SetData {
        /// The node.
        path: String,
        /// New data; `None` for a null buffer.
        data: Option<Vec<u8>>,
        /// Expected version, -1 for any.
        version: i32,
    },
    /// Check a node's version.
    Check {
        /// The node.
        path: String,
        /// Expected version, -1 for any.
        version: i32,
    },
    /// Replace a node's ACL.
    SetAcl {
        /// The node.
        path: String,
        /// New ACL.
        acl: Vec<Acl>,
        /// Expected ACL version, -1 for any.
        version: i32,
    },
}

impl WriteOp {
    /// The path the operation is about.
    pub fn path(&self) -> &str {
        match self {
            WriteOp::Create(c) => &c.path,
            WriteOp::Delete { path, .. }
            | WriteOp::SetData { path, .. }
            | WriteOp::Check { path, .. }
            | WriteOp::SetAcl { path, .. } => path,
        }
    }
}

/// One read operation inside a `multiRead`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOp {
    /// `getData` without watch.
    GetData(String),
    /// `getChildren` without watch.
    GetChildren(String),
    /// A write operation, which ZooKeeper decodes but refuses to run in a `multiRead`.
    Write,
}

/// A decoded client request (after the request header), grouped by the family of requests that
/// handles it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Reads of nodes: `exists`, `getData`, `getChildren`, `sync`, `multiRead` ….
    Read(ReadRequest),
    /// A single write.
    Write(WriteOp),
    /// `multi`: several writes, all or nothing.
    Multi(Vec<WriteOp>),
    /// Watch management: `checkWatches`, `removeWatches`, `setWatches`, `addWatch`.
    Watch(WatchRequest),
    /// Session control and requests the server refuses: `ping`, `closeSession`, `reconfig`,
    /// `sasl`, unknown opcodes.
    Session(SessionRequest),
    /// Identities and ACLs: `auth`, `whoAmI`, `getACL`.
    Auth(AuthRequest),
}

/// The read requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadRequest {
    /// `exists`.
    Exists {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
    },
    /// `getData`.
    GetData {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
    },
    /// `getChildren` (`with_stat` false) or `getChildren2`.
    GetChildren {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
        /// Reply with the node's stat too (`getChildren2`).
        with_stat: bool,
    },
    /// `sync`.
    Sync(String),
    /// `multiRead`.
    MultiRead(Vec<ReadOp>),
    /// `getEphemerals` with a path prefix.
    GetEphemerals(String),
    /// `getAllChildrenNumber`.
    GetAllChildrenNumber(String),
}

/// The paths a reconnecting client asks to watch again (`setWatches`, `setWatches2`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetWatches {
    /// Zxid the client has seen.
    pub relative_zxid: i64,
    /// Data watches.
    pub data: Vec<String>,
    /// Exist watches.
    pub exist: Vec<String>,
    /// Child watches.
    pub child: Vec<String>,
    /// Persistent watches.
    pub persistent: Vec<String>,
    /// Persistent recursive watches.
    pub recursive: Vec<String>,
}

/// The watch management requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchRequest {
    /// `checkWatches` (`remove` false) or `removeWatches`.
    CheckOrRemove {
        /// The node.
        path: String,
        /// Watcher type (children 1, data 2, any 3, persistent 4, recursive 5).
        kind: i32,
        /// Remove rather than check.
        remove: bool,
    },
    /// `setWatches` / `setWatches2`.
    Set(SetWatches),
    /// `addWatch`.
    Add {
        /// The node.
        path: String,
        /// 0 persistent, 1 persistent recursive.
        mode: i32,
    },
}

/// The session requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionRequest {
    /// `ping`.
    Ping,
    /// `closeSession`.
    Close,
    /// `reconfig` (refused: reconfiguration is disabled).
    Reconfig,
    /// `sasl` (not supported).
    Sasl,
    /// An opcode this server does not know.
    Unknown(i32),
}

/// The identity and ACL requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthRequest {
    /// `auth`.
    Auth {
        /// The scheme.
        scheme: String,
        /// Credentials.
        auth: Vec<u8>,
    },
    /// `whoAmI`.
    WhoAmI,
    /// `getACL`.
    GetAcl(String),
}

impl Request {
    /// The path the request is about (for a multi, its first operation's path).
    pub fn path(&self) -> Option<&str> {
        match self {
            Request::Write(op) => Some(op.path()),
            Request::Read(
                ReadRequest::Exists { path, .. }
                | ReadRequest::GetData { path, .. }
                | ReadRequest::GetChildren { path, .. }
                | ReadRequest::Sync(path)
                | ReadRequest::GetEphemerals(path)
                | ReadRequest::GetAllChildrenNumber(path),
            )
            | Request::Watch(
                WatchRequest::CheckOrRemove { path, .. } | WatchRequest::Add { path, .. },
            )
            | Request::Auth(AuthRequest::GetAcl(path)) => Some(path),
            Request::Multi(ops) => ops.first().map(WriteOp::path),
            Request::Read(ReadRequest::MultiRead(ops)) => ops.first().and_then(|op| match op {
                ReadOp::GetData(p) | ReadOp::GetChildren(p) => Some(p.as_str()),
                ReadOp::Write => None,
            }),
            _ => None,
        }
    }

    /// Decodes the body of a request of type `opcode`.
    pub fn decode(opcode: i32, body: &[u8]) -> Decoded<Request> {
        let mut r = Reader::new(body);
        let r = &mut r;
        Ok(match opcode {
            op::CREATE | op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => {
                Request::Write(WriteOp::Create(decode_create(opcode, r)?))
            }
            op::DELETE | op::DELETE_CONTAINER | op::SET_DATA | op::CHECK | op::SET_ACL => {
                Request::Write(decode_write(opcode, r)?)
            }
            op::MULTI => Request::Multi(decode_multi(r)?),
            op::EXISTS => Request::Read(ReadRequest::Exists {
                path: r.string()?,
                watch: r.bool()?,
            }),
            op::GET_DATA => Request::Read(ReadRequest::GetData {
                path: r.string()?,
                watch: r.bool()?,
            }),
            op::GET_CHILDREN | op::GET_CHILDREN2 => Request::Read(ReadRequest::GetChildren {
                path: r.string()?,
                watch: r.bool()?,
                with_stat: opcode == op::GET_CHILDREN2,
            }),
            op::SYNC => Request::Read(ReadRequest::Sync(r.string()?)),
            op::MULTI_READ => Request::Read(ReadRequest::MultiRead(decode_multi_read(r)?)),
            op::GET_EPHEMERALS => Request::Read(ReadRequest::GetEphemerals(
                r.opt_string()?.unwrap_or_default(),
            )),
            op::GET_ALL_CHILDREN_NUMBER => {
                Request::Read(ReadRequest::GetAllChildrenNumber(r.string()?))
            }
            op::CHECK_WATCHES | op::REMOVE_WATCHES => Request::Watch(WatchRequest::CheckOrRemove {
                path: r.string()?,
                kind: r.i32()?,
                remove: opcode == op::REMOVE_WATCHES,
            }),
            op::SET_WATCHES | op::SET_WATCHES2 => {
                let relative_zxid = r.i64()?;
                let data = r.strings()?;
                let exist = r.strings()?;
                let child = r.strings()?;
                let (persistent, recursive) = if opcode == op::SET_WATCHES2 {
                    (r.strings()?, r.strings()?)
                } else {
                    (Vec::new(), Vec::new())
                };
                Request::Watch(WatchRequest::Set(SetWatches {
                    relative_zxid,
                    data,
                    exist,
                    child,
                    persistent,
                    recursive,
                }))
            }
            op::ADD_WATCH => Request::Watch(WatchRequest::Add {
                path: r.string()?,
                mode: r.i32()?,
            }),
            op::AUTH => {
                let _type = r.i32()?;
                Request::Auth(AuthRequest::Auth {
                    scheme: r.string()?,
                    auth: r.data()?,
                })
            }
            op::WHO_AM_I => Request::Auth(AuthRequest::WhoAmI),
            op::GET_ACL => Request::Auth(AuthRequest::GetAcl(r.string()?)),
            op::PING => Request::Session(SessionRequest::Ping),
            op::CLOSE_SESSION => Request::Session(SessionRequest::Close),
            op::RECONFIG => Request::Session(SessionRequest::Reconfig),
            op::SASL => Request::Session(SessionRequest::Sasl),
            other => Request::Session(SessionRequest::Unknown(other)),
        })
    }
}

fn decode_create(opcode: i32, r: &mut Reader<'_>) -> Decoded<CreateOp> {
    let path = r.string()?;
    let data = r.buffer()?;
    let acl = r.acls()?;
    let flags = r.i32()?;
    let ttl = if opcode == op::CREATE_TTL {
        r.i64()?
    } else {
        -1
    };
    Ok(CreateOp {
        opcode,
        path,
        data,
        acl,
        flags,
        ttl,
    })
}

fn decode_write(opcode: i32, r: &mut Reader<'_>) -> Decoded<WriteOp> {
    Ok(match opcode {
        op::CREATE | op::CREATE2 | op::CREATE_CONTAINER | op::CREATE_TTL => {
            WriteOp::Create(decode_create(opcode, r)?)
        }
        op::DELETE => WriteOp::Delete {
            path: r.string()?,
            version: r.i32()?,
            container: false,
        },
        op::DELETE_CONTAINER => {
            // ZooKeeper 3.8 reads the whole body as the raw path (no length prefix): a
            // jute-framed path therefore contains NUL bytes and is refused as a bad argument.
            let rest = r.take(r.remaining())?;
            WriteOp::Delete {
                path: String::from_utf8_lossy(rest).into_owned(),
                version: -1,
                container: true,
            }
        }
        op::SET_DATA => WriteOp::SetData {
            path: r.string()?,
            data: r.buffer()?,
            version: r.i32()?,
        },
        op::CHECK => WriteOp::Check {
            path: r.string()?,
            version: r.i32()?,
        },
        op::SET_ACL => WriteOp::SetAcl {
            path: r.string()?,
            acl: r.acls()?,
            version: r.i32()?,
        },
        _ => return Err(DecodeError::BadValue),
    })
}

/// Reads a multi header: `(type, done)`.
fn multi_header(r: &mut Reader<'_>) -> Decoded<(i32, bool)> {
    let kind = r.i32()?;
    let done = r.bool()?;
    let _err = r.i32()?;
    Ok((kind, done))
}

fn decode_multi(r: &mut Reader<'_>) -> Decoded<Vec<WriteOp>> {
    let mut ops = Vec::new();
    loop {
        let (kind, done) = multi_header(r)?;
        if done {
            return Ok(ops);
        }
        if kind == op::SET_ACL || kind == op::DELETE_CONTAINER {
            return Err(DecodeError::BadValue);
        }
        let mut write = decode_write(kind, r)?;
        // ZooKeeper 3.8 rebuilds multi creates from their flags: the opcode follows the mode
        // (container 19, TTL 21, anything else a plain create, answered without a stat).
        if let WriteOp::Create(create) = &mut write {
            if create.opcode != op::CREATE_TTL {
                create.opcode = match create.flags {
                    4 => op::CREATE_CONTAINER,
                    5 | 6 => op::CREATE_TTL,
                    _ => op::CREATE,
                };
            }
        }
        ops.push(write);
    }
}

fn decode_multi_read(r: &mut Reader<'_>) -> Decoded<Vec<ReadOp>> {
    let mut ops = Vec::new();
    let (mut reads, mut writes) = (false, false);
    loop {
        let (kind, done) = multi_header(r)?;
        if done {
            break;
        }
        match kind {
            op::GET_DATA | op::GET_CHILDREN => {
                let path = r.string()?;
                let _watch = r.bool()?;
                reads = true;
                ops.push(if kind == op::GET_DATA {
                    ReadOp::GetData(path)
                } else {
                    ReadOp::GetChildren(path)
                });
            }
            op::CREATE
            | op::CREATE2
            | op::CREATE_CONTAINER
            | op::CREATE_TTL
            | op::DELETE
            | op::SET_DATA
            | op::CHECK => {
                decode_write(kind, r)?;
                writes = true;
                ops.push(ReadOp::Write);
            }
            _ => return Err(DecodeError::BadValue),
        }
    }
    // ZooKeeper refuses to decode a transaction that mixes reads and writes.
    if reads && writes {
        return Err(DecodeError::BadValue);
    }
    Ok(ops)
}

/// Encodes a watch notification frame (3.8 sends zxid -1 in its header).
pub fn notification(event_type: i32, path: &str) -> Vec<u8> {
    let mut w = Writer::reply(xid::NOTIFICATION, -1, code::OK);
    w.i32(event_type).i32(SYNC_CONNECTED).string(path);
    w.finish()
}

/// `KeeperState.SyncConnected` in watch notifications.
pub const SYNC_CONNECTED: i32 = 3;

/// Watch event types.
pub mod event {
    /// A node was created.
    pub const NODE_CREATED: i32 = 1;
    /// A node was deleted.
    pub const NODE_DELETED: i32 = 2;
    /// A node's data changed.
    pub const NODE_DATA_CHANGED: i32 = 3;
    /// A node's children changed.
    pub const NODE_CHILDREN_CHANGED: i32 = 4;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_primitives() {
        let mut w = Writer::default();
        w.i32(-7)
            .i64(1 << 40)
            .bool(true)
            .buffer(b"abc")
            .string("/x");
        w.strings(&["a", "bc"]);
        let bytes = w.buf;
        let mut r = Reader::new(&bytes);
        assert_eq!(r.i32().unwrap(), -7);
        assert_eq!(r.i64().unwrap(), 1 << 40);
        assert!(r.bool().unwrap());
        assert_eq!(r.buffer().unwrap().unwrap(), b"abc");
        assert_eq!(r.string().unwrap(), "/x");
        assert_eq!(r.strings().unwrap(), vec!["a", "bc"]);
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.i32(), Err(DecodeError::Truncated));
    }

    #[test]
    fn rejects_lying_lengths() {
        let mut w = Writer::default();
        w.i32(i32::MAX);
        assert_eq!(Reader::new(&w.buf).buffer(), Err(DecodeError::BadLength));
        let mut w = Writer::default();
        w.i32(-5);
        assert_eq!(Reader::new(&w.buf).buffer(), Err(DecodeError::BadLength));
        let mut w = Writer::default();
        w.i32(1_000_000);
        assert_eq!(Reader::new(&w.buf).strings(), Err(DecodeError::Truncated));
        let mut w = Writer::default();
        w.i32(-1);
        assert_eq!(Reader::new(&w.buf).buffer(), Ok(None));
    }

    #[test]
    fn frame_has_length_prefix() {
        let frame = Writer::reply(5, 9, -101).finish();
        assert_eq!(frame.len(), 4 + 16);
        assert_eq!(&frame[..4], &16i32.to_be_bytes());
    }

    #[test]
    fn connect_request_without_read_only() {
        let mut w = Writer::default();
        w.i32(0).i64(3).i32(5000).i64(0).buffer(&[0; 16]);
        let req = ConnectRequest::decode(&w.buf).unwrap();
        assert_eq!(req.timeout, 5000);
        assert!(!req.read_only);
    }

    #[test]
    fn next_frame_cuts_whole_frames_only() {
        let mut pending = vec![0, 0, 0, 3, b'a', b'b'];
        assert_eq!(next_frame(&mut pending, 16, false), Framed::Incomplete);
        pending.extend_from_slice(&[b'c', 0, 0]);
        let Framed::Frame(frame) = next_frame(&mut pending, 16, false) else {
            panic!("a whole frame");
        };
        assert_eq!(frame.body(), b"abc");
        assert_eq!(frame.as_bytes(), &[0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(pending, [0, 0], "the rest stays");
        assert_eq!(next_frame(&mut pending, 16, false), Framed::Incomplete);
    }

    #[test]
    fn next_frame_refuses_bad_lengths_and_tells_four_letter_words() {
        let mut long = 17i32.to_be_bytes().to_vec();
        assert_eq!(next_frame(&mut long, 16, false), Framed::TooLong(17));
        let mut negative = (-1i32).to_be_bytes().to_vec();
        assert_eq!(next_frame(&mut negative, 16, false), Framed::TooLong(-1));
        let mut ruok = b"ruok".to_vec();
        assert_eq!(
            next_frame(&mut ruok, 16, true),
            Framed::FourLetter(*b"ruok")
        );
        assert_eq!(ruok, b"ruok", "nothing cut");
        let len = i32::from_be_bytes(*b"ruok");
        assert_eq!(next_frame(&mut ruok, 16, false), Framed::TooLong(len));
    }
}
