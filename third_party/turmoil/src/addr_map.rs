//! A map keyed by host address with a cheap hasher: the simulation looks
//! hosts up by address at every step, and SipHash (the default) was a
//! tenth of a run's instructions. Iteration follows insertion order, as an
//! `IndexMap`'s does whatever its hasher, so a run is unchanged.

use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

use indexmap::IndexMap;

/// An `IndexMap` from host address to `V`, hashed by [`AddrHasher`].
pub(crate) type AddrMap<V> = IndexMap<IpAddr, V, BuildHasherDefault<AddrHasher>>;

/// FNV-1a over the bytes an address hashes: fast for a few bytes, and the
/// same on every run (no random seed).
pub(crate) struct AddrHasher(u64);

impl Default for AddrHasher {
    fn default() -> Self {
        AddrHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
