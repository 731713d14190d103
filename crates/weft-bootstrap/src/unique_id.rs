//! [`UniqueId`]: the 128 bytes every rank of a job must share.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener},
    str::FromStr,
    sync::{Mutex, PoisonError},
};

use crate::BootstrapError;

/// Size of a [`UniqueId`] in bytes (the size of an `ncclUniqueId`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// Size of the job secret inside a [`UniqueId`] in bytes.
pub const SECRET_BYTES: usize = 32;

const ID_MAGIC: [u8; 4] = *b"wfID";
const ID_VERSION: u8 = 1;

// Layout, all integers little-endian:
//   0..4    magic "wfID"
//   4       layout version (1)
//   5       address family (4 or 6)
//   6..8    port (u16)
//   8..24   IP (IPv4 in the first 4 bytes, the rest zero)
//   24..28  IPv6 scope id (u32; zero for IPv4)
//   28..32  reserved, zero
//   32..64  secret
//   64..128 reserved, zero
const FAMILY: usize = 5;
const PORT: std::ops::Range<usize> = 6..8;
const IP: std::ops::Range<usize> = 8..24;
const SCOPE: std::ops::Range<usize> = 24..28;
const SECRET: std::ops::Range<usize> = 32..64;
const RESERVED: [std::ops::Range<usize>; 2] = [28..32, 64..128];

/// Listeners bound by [`UniqueId::new`] for ids whose port was 0, waiting for rank 0 of this
/// process to pick them up.
static PREBOUND: Mutex<Vec<(SocketAddr, TcpListener)>> = Mutex::new(Vec::new());

/// Identifies one job: the address where rank 0 hosts the rendezvous root and a random 32-byte
/// secret that every connection must prove it knows.
///
/// Create it once (usually on rank 0), pass it to every rank as bytes ([`to_bytes`],
/// [`from_bytes`]) or as 256 hex digits ([`Display`](fmt::Display), [`FromStr`]), and give it to
/// [`TcpBootstrapBuilder::connect`](crate::TcpBootstrapBuilder::connect). Anyone holding it can
/// join the job, so treat it like a password. `Debug` does not print the secret.
///
/// [`to_bytes`]: UniqueId::to_bytes
/// [`from_bytes`]: UniqueId::from_bytes
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId([u8; UNIQUE_ID_BYTES]);

impl UniqueId {
    /// A new id with a fresh random secret for a root listening on `listen`.
    ///
    /// If `listen` has port 0, a listener is bound now on an OS-chosen port, the id records that
    /// port, and the listener is kept for rank 0 *of this process*: a rank 0 running in another
    /// process would find the port taken. Fails if `listen`'s IP is unspecified (`0.0.0.0`, `::`),
    /// since other ranks could not connect to it, or if binding fails.
    pub fn new(listen: SocketAddr) -> Result<Self, BootstrapError> {
        let mut secret: [u8; SECRET_BYTES] = rand::random();
        while secret == [0; SECRET_BYTES] {
            secret = rand::random();
        }
        if listen.port() != 0 {
            return Self::from_parts(listen, secret);
        }
        check_connectable(listen.ip())?;
        let listener = TcpListener::bind(listen)
            .map_err(|e| BootstrapError::io(None, format!("binding a rendezvous listener on {listen}"), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| BootstrapError::io(None, "reading the rendezvous listener's address", e))?;
        let id = Self::from_parts(bound, secret)?;
        PREBOUND.lock().unwrap_or_else(PoisonError::into_inner).push((bound, listener));
        Ok(id)
    }

    /// An id for `address` with the given secret, e.g. a secret agreed on out of band.
    ///
    /// Fails if the port is 0, the IP is unspecified, or the secret is all zero.
    pub fn from_parts(address: SocketAddr, secret: [u8; SECRET_BYTES]) -> Result<Self, BootstrapError> {
        if address.port() == 0 {
            return Err(invalid("port 0 cannot be connected to"));
        }
        check_connectable(address.ip())?;
        if secret == [0; SECRET_BYTES] {
            return Err(invalid("the secret is all zero"));
        }
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        bytes[..4].copy_from_slice(&ID_MAGIC);
        bytes[4] = ID_VERSION;
        bytes[PORT].copy_from_slice(&address.port().to_le_bytes());
        match address {
            SocketAddr::V4(v4) => {
                bytes[FAMILY] = 4;
                bytes[IP][..4].copy_from_slice(&v4.ip().octets());
            }
            SocketAddr::V6(v6) => {
                bytes[FAMILY] = 6;
                bytes[IP].copy_from_slice(&v6.ip().octets());
                bytes[SCOPE].copy_from_slice(&v6.scope_id().to_le_bytes());
            }
        }
        bytes[SECRET].copy_from_slice(&secret);
        Ok(Self(bytes))
    }

    /// Where rank 0 hosts the rendezvous root.
    pub fn address(&self) -> SocketAddr {
        let port = u16::from_le_bytes([self.0[PORT.start], self.0[PORT.start + 1]]);
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&self.0[IP]);
        if self.0[FAMILY] == 4 {
            SocketAddr::from((Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]), port))
        } else {
            let mut scope = [0u8; 4];
            scope.copy_from_slice(&self.0[SCOPE]);
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, u32::from_le_bytes(scope)))
        }
    }

    /// The job secret.
    pub fn secret(&self) -> [u8; SECRET_BYTES] {
        let mut secret = [0u8; SECRET_BYTES];
        secret.copy_from_slice(&self.0[SECRET]);
        secret
    }

    /// The 128 bytes, e.g. to fill an `ncclUniqueId`.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        self.0
    }

    /// Parses and validates 128 bytes written by [`to_bytes`](UniqueId::to_bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, BootstrapError> {
        let bytes: [u8; UNIQUE_ID_BYTES] = bytes.try_into().map_err(|_| BootstrapError::InvalidUniqueId {
            reason: format!("expected {UNIQUE_ID_BYTES} bytes, got {}", bytes.len()),
        })?;
        if bytes[..4] != ID_MAGIC {
            return Err(invalid("bad magic (not a weft unique id)"));
        }
        if bytes[4] != ID_VERSION {
            return Err(BootstrapError::InvalidUniqueId {
                reason: format!("unsupported layout version {} (this build reads version {ID_VERSION})", bytes[4]),
            });
        }
        if RESERVED.iter().any(|r| bytes[r.clone()].iter().any(|&b| b != 0)) {
            return Err(invalid("reserved bytes are not zero"));
        }
        let is_v4 = match bytes[FAMILY] {
            4 => true,
            6 => false,
            other => {
                return Err(BootstrapError::InvalidUniqueId { reason: format!("unknown address family {other}") });
            }
        };
        if is_v4 && bytes[IP.start + 4..SCOPE.end].iter().any(|&b| b != 0) {
            return Err(invalid("an IPv4 id has bytes set past the IPv4 address"));
        }
        let id = Self(bytes);
        // Re-run the constructor's checks (port, IP, secret) on the decoded parts.
        let checked = Self::from_parts(id.address(), id.secret())?;
        debug_assert_eq!(checked, id);
        Ok(checked)
    }

    /// Takes the listener [`UniqueId::new`] bound for this id's address, if this process made it.
    pub(crate) fn take_prebound(&self) -> Option<TcpListener> {
        let address = self.address();
        let mut prebound = PREBOUND.lock().unwrap_or_else(PoisonError::into_inner);
        let index = prebound.iter().position(|(addr, _)| *addr == address)?;
        Some(prebound.swap_remove(index).1)
    }
}

fn invalid(reason: &str) -> BootstrapError {
    BootstrapError::InvalidUniqueId { reason: reason.to_owned() }
}

fn check_connectable(ip: IpAddr) -> Result<(), BootstrapError> {
    if ip.is_unspecified() {
        return Err(BootstrapError::InvalidUniqueId {
            reason: format!("the unspecified address {ip} cannot be connected to; use an IP the other ranks can reach"),
        });
    }
    Ok(())
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueId").field("address", &self.address()).field("secret", &"<redacted>").finish()
    }
}

/// 256 lowercase hex digits: the form for environment variables and command lines.
impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Parses the 256 hex digits written by `Display` (either case).
impl FromStr for UniqueId {
    type Err = BootstrapError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = decode_hex::<UNIQUE_ID_BYTES>(s).map_err(|reason| BootstrapError::InvalidUniqueId {
            reason: format!("not {} hex digits: {reason}", 2 * UNIQUE_ID_BYTES),
        })?;
        Self::from_bytes(&bytes)
    }
}

/// Decodes exactly `2 * N` hex digits.
pub(crate) fn decode_hex<const N: usize>(s: &str) -> Result<[u8; N], String> {
    let digits = s.as_bytes();
    if digits.len() != 2 * N {
        return Err(format!("got {} characters", s.chars().count()));
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        let hi = hex_value(pair[0]).ok_or_else(|| bad_digit(s, 2 * i))?;
        let lo = hex_value(pair[1]).ok_or_else(|| bad_digit(s, 2 * i + 1))?;
        out[i] = hi << 4 | lo;
    }
    Ok(out)
}

fn bad_digit(s: &str, index: usize) -> String {
    format!("byte {index} ({:?}) is not a hex digit", s.as_bytes()[index] as char)
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn sample() -> UniqueId {
        UniqueId::from_parts("192.168.7.9:29500".parse().unwrap(), [0x5a; SECRET_BYTES]).unwrap()
    }

    #[test]
    fn round_trips_through_bytes_and_hex() {
        for addr in ["192.168.7.9:29500", "[fe80::1%4]:80", "[::1]:1"] {
            let id = UniqueId::from_parts(addr.parse().unwrap(), [3; SECRET_BYTES]).unwrap();
            assert_eq!(id.address(), addr.parse::<SocketAddr>().unwrap());
            assert_eq!(id.secret(), [3; SECRET_BYTES]);
            assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
            let hex = id.to_string();
            assert_eq!(hex.len(), 256);
            assert_eq!(hex.parse::<UniqueId>().unwrap(), id);
            assert_eq!(hex.to_uppercase().parse::<UniqueId>().unwrap(), id);
        }
    }

    #[test]
    fn golden_layout() {
        let bytes = sample().to_bytes();
        assert_eq!(&bytes[..8], &[b'w', b'f', b'I', b'D', 1, 4, 0x3c, 0x73]);
        assert_eq!(&bytes[8..12], &[192, 168, 7, 9]);
        assert!(bytes[12..32].iter().all(|&b| b == 0));
        assert!(bytes[32..64].iter().all(|&b| b == 0x5a));
        assert!(bytes[64..].iter().all(|&b| b == 0));
    }

    #[test]
    fn new_ids_have_fresh_secrets() {
        let addr = "10.0.0.1:1234".parse().unwrap();
        let (a, b) = (UniqueId::new(addr).unwrap(), UniqueId::new(addr).unwrap());
        assert_eq!(a.address(), b.address());
        assert_ne!(a.secret(), b.secret());
    }

    #[test]
    fn port_zero_binds_and_keeps_a_listener() {
        let id = UniqueId::new("127.0.0.1:0".parse().unwrap()).unwrap();
        assert_ne!(id.address().port(), 0);
        let listener = id.take_prebound().expect("listener kept");
        assert_eq!(listener.local_addr().unwrap(), id.address());
        assert!(id.take_prebound().is_none());
    }

    fn rejects(bytes: &[u8], needle: &str) {
        match UniqueId::from_bytes(bytes) {
            Err(BootstrapError::InvalidUniqueId { reason }) => {
                assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
            }
            other => panic!("expected InvalidUniqueId({needle}), got {other:?}"),
        }
    }

    #[test]
    fn malformed_bytes_are_rejected() {
        let good = sample().to_bytes();
        rejects(&good[..127], "expected 128 bytes");
        rejects(&[good.as_slice(), &[0]].concat(), "expected 128 bytes");
        let edit = |i: usize, v: u8| {
            let mut b = good;
            b[i] = v;
            b
        };
        rejects(&edit(0, b'x'), "magic");
        rejects(&edit(4, 2), "version");
        rejects(&edit(5, 5), "family");
        rejects(&edit(12, 1), "past the IPv4 address");
        rejects(&edit(24, 1), "past the IPv4 address");
        rejects(&edit(29, 1), "reserved");
        rejects(&edit(127, 1), "reserved");
        rejects(
            &{
                let mut b = edit(6, 0);
                b[7] = 0;
                b
            },
            "port 0",
        );
        rejects(
            &{
                let mut b = good;
                b[8..12].fill(0);
                b
            },
            "unspecified",
        );
        rejects(
            &{
                let mut b = good;
                b[32..64].fill(0);
                b
            },
            "all zero",
        );
    }

    #[test]
    fn malformed_hex_is_rejected() {
        let hex = sample().to_string();
        for bad in [
            String::new(),
            hex[..255].to_owned(),
            format!("{hex}0"),
            format!("{}g", &hex[..255]),
            format!("{}é", &hex[..254]),
            format!(" {}", &hex[..255]),
        ] {
            assert!(matches!(bad.parse::<UniqueId>(), Err(BootstrapError::InvalidUniqueId { .. })), "{bad:?} parsed");
        }
    }

    #[test]
    fn constructors_reject_unusable_parts() {
        let secret = [1; SECRET_BYTES];
        assert!(UniqueId::from_parts("1.2.3.4:0".parse().unwrap(), secret).is_err());
        assert!(UniqueId::from_parts("0.0.0.0:5".parse().unwrap(), secret).is_err());
        assert!(UniqueId::from_parts("[::]:5".parse().unwrap(), secret).is_err());
        assert!(UniqueId::from_parts("1.2.3.4:5".parse().unwrap(), [0; SECRET_BYTES]).is_err());
        assert!(UniqueId::new("0.0.0.0:0".parse().unwrap()).is_err());
    }

    #[test]
    fn debug_hides_the_secret() {
        let debug = format!("{:?}", sample());
        assert!(debug.contains("192.168.7.9:29500"));
        assert!(!debug.contains("5a5a"));
        assert!(!debug.contains("90, 90"));
    }
}
