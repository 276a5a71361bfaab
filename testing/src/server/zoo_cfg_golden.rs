//! The `zoo.cfg` files the crate wrote before the standalone server and the cluster's members
//! shared one writer (kept beside this file, in `zoo_cfg_golden/`), rendered again by today's
//! writer in the tests of `config`: the same options give the same file, byte for byte. Ports
//! are made up; nothing here is started.

/// A standalone server with the builder's defaults on port 2181, data in `/zk/data`.
pub(crate) const STANDALONE: &str = include_str!("zoo_cfg_golden/standalone.cfg");

/// A standalone server with a 250 ms tick, sessions of 1 s to 30 s, TLS on port 2182 beside the
/// plaintext port 2181 (client certificates wanted), and SASL DIGEST-MD5 required.
pub(crate) const STANDALONE_TLS_SASL: &str = include_str!("zoo_cfg_golden/standalone-tls-sasl.cfg");

/// A standalone server serving TLS only (port 2182; 2181 reserved, not served), no SASL.
pub(crate) const STANDALONE_TLS_ONLY: &str = include_str!("zoo_cfg_golden/standalone-tls-only.cfg");

/// The ports of [`MEMBER`]'s ensemble: member `i` has client port `2001 + 10 i`, quorum port
/// `2002 + 10 i` and election port `2003 + 10 i` (as `(client, peer, election)`).
pub(crate) const MEMBER_PORTS: [(u16, u16, u16); 3] =
    [(2001, 2002, 2003), (2011, 2012, 2013), (2021, 2022, 2023)];

/// The second member (`myid` 2) of a 3-member ensemble with the cluster builder's defaults,
/// its peers linked directly, data in `/zk/node-1/data`.
pub(crate) const MEMBER: &str = include_str!("zoo_cfg_golden/member.cfg");

/// How the second member of [`MEMBER_PROXIED`] reaches each member: its own real ports, and
/// proxies (ports 3002/3003 and 3022/3023) for the other two.
pub(crate) const MEMBER_PROXIED_VIEW: [(u16, u16, u16); 3] =
    [(2001, 3002, 3003), (2011, 2012, 2013), (2021, 3022, 3023)];

/// The second member of a 3-member ensemble with a 50 ms tick, `initLimit` 10, `syncLimit` 5,
/// local sessions, and its peers reached through proxies.
pub(crate) const MEMBER_PROXIED: &str = include_str!("zoo_cfg_golden/member-proxied.cfg");
