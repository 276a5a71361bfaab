//! The `zoo.cfg` files the crate wrote before the standalone server and the cluster's members
//! shared one writer, rendered again by today's writer in the tests beside it: the same options
//! give the same file, byte for byte. Ports are made up; nothing here is started.

/// A standalone server with the builder's defaults on port 2181, data in `/zk/data`.
pub(crate) const STANDALONE: &str = "\
tickTime=100
clientPort=2181
clientPortAddress=127.0.0.1
dataDir=/zk/data
admin.enableServer=false
4lw.commands.whitelist=*
extendedTypesEnabled=true
minSessionTimeout=400
maxSessionTimeout=60000
maxClientCnxns=0
standaloneEnabled=true
";

/// A standalone server with a 250 ms tick, sessions of 1 s to 30 s, TLS on port 2182 beside the
/// plaintext port 2181 (client certificates wanted), and SASL DIGEST-MD5 required.
pub(crate) const STANDALONE_TLS_SASL: &str = "\
tickTime=250
clientPort=2181
clientPortAddress=127.0.0.1
secureClientPort=2182
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=/certs/key.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=/certs/trust.pem
ssl.trustStore.type=PEM
ssl.clientAuth=want
authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider
authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider
sessionRequireClientSASLAuth=true
dataDir=/zk/data
admin.enableServer=false
4lw.commands.whitelist=*
extendedTypesEnabled=true
minSessionTimeout=1000
maxSessionTimeout=30000
maxClientCnxns=0
standaloneEnabled=true
";

/// A standalone server serving TLS only (port 2182; 2181 reserved, not served), no SASL.
pub(crate) const STANDALONE_TLS_ONLY: &str = "\
tickTime=100
secureClientPort=2182
secureClientPortAddress=127.0.0.1
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=/certs/key.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=/certs/trust.pem
ssl.trustStore.type=PEM
ssl.clientAuth=need
authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider
dataDir=/zk/data
admin.enableServer=false
4lw.commands.whitelist=*
extendedTypesEnabled=true
minSessionTimeout=400
maxSessionTimeout=60000
maxClientCnxns=0
standaloneEnabled=true
";

/// The ports of [`MEMBER`]'s ensemble: member `i` has client port `2001 + 10 i`, quorum port
/// `2002 + 10 i` and election port `2003 + 10 i` (as `(client, peer, election)`).
pub(crate) const MEMBER_PORTS: [(u16, u16, u16); 3] =
    [(2001, 2002, 2003), (2011, 2012, 2013), (2021, 2022, 2023)];

/// The second member (`myid` 2) of a 3-member ensemble with the cluster builder's defaults,
/// its peers linked directly, data in `/zk/node-1/data`.
pub(crate) const MEMBER: &str = "\
tickTime=100
initLimit=50
syncLimit=20
clientPort=2011
clientPortAddress=127.0.0.1
dataDir=/zk/node-1/data
admin.enableServer=false
4lw.commands.whitelist=*
extendedTypesEnabled=true
minSessionTimeout=400
maxSessionTimeout=60000
maxClientCnxns=0
standaloneEnabled=false
reconfigEnabled=false
quorumListenOnAllIPs=false
server.1=127.0.0.1:2002:2003
server.2=127.0.0.1:2012:2013
server.3=127.0.0.1:2022:2023
";

/// How the second member of [`MEMBER_PROXIED`] reaches each member: its own real ports, and
/// proxies (ports 3002/3003 and 3022/3023) for the other two.
pub(crate) const MEMBER_PROXIED_VIEW: [(u16, u16, u16); 3] =
    [(2001, 3002, 3003), (2011, 2012, 2013), (2021, 3022, 3023)];

/// The second member of a 3-member ensemble with a 50 ms tick, `initLimit` 10, `syncLimit` 5,
/// local sessions, and its peers reached through proxies.
pub(crate) const MEMBER_PROXIED: &str = "\
tickTime=50
initLimit=10
syncLimit=5
clientPort=2011
clientPortAddress=127.0.0.1
dataDir=/zk/node-1/data
admin.enableServer=false
4lw.commands.whitelist=*
extendedTypesEnabled=true
minSessionTimeout=400
maxSessionTimeout=60000
maxClientCnxns=0
standaloneEnabled=false
reconfigEnabled=false
quorumListenOnAllIPs=false
localSessionsEnabled=true
localSessionsUpgradingEnabled=true
server.1=127.0.0.1:3002:3003
server.2=127.0.0.1:2012:2013
server.3=127.0.0.1:3022:3023
";
