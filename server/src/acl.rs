//! Access control: permission checks, ACL validation and the `digest` scheme.
//!
//! A `digest` identity is `user:base64(sha1("user:password"))`. SHA-1 and base64 are small
//! enough to implement here, which keeps the crate free of extra dependencies.

use crate::codec::{code, Acl, Id};

/// Permission bits.
pub mod perms {
    /// Read data, list children, stat.
    pub const READ: i32 = 1;
    /// Write data.
    pub const WRITE: i32 = 2;
    /// Create children.
    pub const CREATE: i32 = 4;
    /// Delete children.
    pub const DELETE: i32 = 8;
    /// Change the ACL.
    pub const ADMIN: i32 = 16;
    /// Everything.
    pub const ALL: i32 = 31;
}

/// Whether `auth` (a connection's identities) grants any of the bits in `perm` under `acl`,
/// following ZooKeeper: an empty ACL allows everything, `super` allows everything, `world:anyone`
/// matches everybody, other schemes match identities of the same scheme.
pub fn allowed(acl: &[Acl], perm: i32, auth: &[Id]) -> bool {
    if acl.is_empty() || auth.iter().any(|id| id.scheme == "super") {
        return true;
    }
    acl.iter().filter(|a| a.perms & perm != 0).any(|a| {
        (a.id.scheme == "world" && a.id.id == "anyone")
            || auth
                .iter()
                .any(|id| id.scheme == a.id.scheme && matches(&a.id, id))
    })
}

fn matches(acl_id: &Id, auth_id: &Id) -> bool {
    match acl_id.scheme.as_str() {
        "ip" => ip_matches(&acl_id.id, &auth_id.id),
        _ => acl_id.id == auth_id.id,
    }
}

/// `ip` ACL ids are an address, optionally with a `/bits` prefix length (IPv4 only here).
fn ip_matches(pattern: &str, addr: &str) -> bool {
    let (net, bits) = match pattern.split_once('/') {
        Some((net, bits)) => match bits.parse::<u32>() {
            Ok(bits) if bits <= 32 => (net, bits),
            _ => return false,
        },
        None => (pattern, 32),
    };
    match (
        net.parse::<std::net::Ipv4Addr>(),
        addr.parse::<std::net::Ipv4Addr>(),
    ) {
        (Ok(net), Ok(addr)) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(net) & mask == u32::from(addr) & mask
        }
        _ => pattern == addr,
    }
}

/// Validates a requested ACL and expands the `auth` scheme to the connection's authenticated
/// identities, as ZooKeeper's `fixupACL` does. Fails with `InvalidACL`.
pub fn fixup(requested: &[Acl], auth: &[Id]) -> Result<Vec<Acl>, i32> {
    let mut unique: Vec<&Acl> = Vec::new();
    for acl in requested {
        if !unique.contains(&acl) {
            unique.push(acl);
        }
    }
    if unique.is_empty() {
        return Err(code::INVALID_ACL);
    }
    let mut out = Vec::new();
    for acl in unique {
        match acl.id.scheme.as_str() {
            "world" if acl.id.id == "anyone" => out.push(acl.clone()),
            "auth" => {
                let mut any = false;
                for id in auth.iter().filter(|id| is_authenticated_scheme(&id.scheme)) {
                    any = true;
                    out.push(Acl {
                        perms: acl.perms,
                        id: id.clone(),
                    });
                }
                if !any {
                    return Err(code::INVALID_ACL);
                }
            }
            "digest" if acl.id.id.split(':').count() == 2 => out.push(acl.clone()),
            "ip" if valid_ip_id(&acl.id.id) => out.push(acl.clone()),
            "super" => out.push(acl.clone()),
            _ => return Err(code::INVALID_ACL),
        }
    }
    Ok(out)
}

/// Schemes whose identities count as authenticated for the `auth` ACL scheme (`ip` does not).
fn is_authenticated_scheme(scheme: &str) -> bool {
    scheme == "digest" || scheme == "super"
}

fn valid_ip_id(id: &str) -> bool {
    let (net, bits) = match id.split_once('/') {
        Some((net, bits)) => (net, bits.parse::<u32>().ok().filter(|b| *b <= 32)),
        None => (id, Some(32)),
    };
    bits.is_some() && net.parse::<std::net::IpAddr>().is_ok()
}

/// The `digest` identity for `user:password` credentials: `user:base64(sha1(credentials))`.
pub fn digest_id(credentials: &[u8]) -> String {
    let text = String::from_utf8_lossy(credentials);
    let user = text.split(':').next().unwrap_or_default();
    format!("{user}:{}", base64(&sha1(text.as_bytes())))
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b0 = u32::from(chunk[0]);
        let b1 = chunk.get(1).copied().map(u32::from);
        let b2 = chunk.get(2).copied().map(u32::from);
        let v = (b0 << 16) | (b1.unwrap_or(0) << 8) | b2.unwrap_or(0);
        let sym = |shift: u32| char::from(ALPHABET[((v >> shift) & 0x3f) as usize]);
        out.push(sym(18));
        out.push(sym(12));
        out.push(if b1.is_some() { sym(6) } else { '=' });
        out.push(if b2.is_some() { sym(0) } else { '=' });
    }
    out
}

/// SHA-1 (FIPS 180-4) of `message`.
pub fn sha1(message: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let bit_len = (message.len() as u64).wrapping_mul(8);
    let mut padded = message.to_vec();
    padded.push(0x80);
    while padded.len() % 64 != 56 {
        padded.push(0);
    }
    padded.extend_from_slice(&bit_len.to_be_bytes());
    for block in padded.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (hi, v) in h.iter_mut().zip([a, b, c, d, e]) {
            *hi = hi.wrapping_add(v);
        }
    }
    let mut out = [0u8; 20];
    for (i, word) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha1_known_vectors() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex(&sha1(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        let million = vec![b'a'; 1_000_000];
        assert_eq!(
            hex(&sha1(&million)),
            "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        );
    }

    #[test]
    fn base64_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn digest_matches_zookeeper() {
        // Computed by ZooKeeper 3.8's `DigestAuthenticationProvider` main method.
        assert_eq!(
            digest_id(b"super:superpw"),
            "super:g9oN2HttPfn8MMWJZ2r45Np/LIA="
        );
        assert_eq!(digest_id(b"alice:pw"), "alice:V55/p2T0OpjQ+low3NVAH4aLvm0=");
    }

    #[test]
    fn acl_checks() {
        let world = Acl {
            perms: perms::READ,
            id: Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        };
        assert!(allowed(std::slice::from_ref(&world), perms::READ, &[]));
        assert!(!allowed(std::slice::from_ref(&world), perms::WRITE, &[]));
        let digest = Id {
            scheme: "digest".into(),
            id: digest_id(b"u:p"),
        };
        let acl = [Acl {
            perms: perms::ALL,
            id: digest.clone(),
        }];
        assert!(allowed(&acl, perms::ADMIN, std::slice::from_ref(&digest)));
        assert!(!allowed(&acl, perms::READ, &[]));
        assert!(ip_matches("127.0.0.0/8", "127.0.0.1"));
        assert!(!ip_matches("10.0.0.1", "127.0.0.1"));
        assert_eq!(fixup(&[], &[]), Err(code::INVALID_ACL));
        let auth_acl = Acl {
            perms: perms::ALL,
            id: Id {
                scheme: "auth".into(),
                id: String::new(),
            },
        };
        assert_eq!(
            fixup(std::slice::from_ref(&auth_acl), &[]),
            Err(code::INVALID_ACL)
        );
        assert_eq!(
            fixup(&[auth_acl], std::slice::from_ref(&digest)),
            Ok(acl.to_vec())
        );
    }
}
