//! Environment variables: torchrun's launch variables and this crate's own knobs.

use std::{
    net::{IpAddr, SocketAddr, ToSocketAddrs},
    time::Duration,
};

use sha2::{Digest, Sha256};

use crate::{
    BootstrapError, DEFAULT_TIMEOUT, UniqueId,
    unique_id::{SECRET_BYTES, decode_hex},
};

/// Env name: `WEFT_BOOTSTRAP_TIMEOUT`. Seconds (a positive decimal number, e.g. `30` or `1.5`)
/// that every bootstrap wait may take. If unset, [`DEFAULT_TIMEOUT`] (30 s). A timeout set on a
/// builder wins over it.
pub const ENV_TIMEOUT: &str = "WEFT_BOOTSTRAP_TIMEOUT";

/// Env name: `WEFT_BOOTSTRAP_SECRET`. The job secret for
/// [`TcpBootstrapBuilder::from_env`](crate::TcpBootstrapBuilder::from_env), as 64 hex digits.
/// If unset, the secret is derived from `MASTER_ADDR:MASTER_PORT` (see
/// [`TorchrunEnv::default_secret`]), which only suits trusted clusters.
pub const ENV_SECRET: &str = "WEFT_BOOTSTRAP_SECRET";

const RANK: &str = "RANK";
const WORLD_SIZE: &str = "WORLD_SIZE";
const LOCAL_RANK: &str = "LOCAL_RANK";
const MASTER_ADDR: &str = "MASTER_ADDR";
const MASTER_PORT: &str = "MASTER_PORT";

/// The launch variables torchrun (and `weft launch`) sets for every process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchrunEnv {
    /// `RANK`: this process's global rank, below `world_size`.
    pub rank: usize,
    /// `WORLD_SIZE`: number of processes in the job, at least 1.
    pub world_size: usize,
    /// `LOCAL_RANK`: this process's index on its host; `None` if unset (the bootstrap itself does
    /// not need it).
    pub local_rank: Option<usize>,
    /// `MASTER_ADDR`: host name or IP of the host where rank 0 runs (IPv6 may be bracketed).
    pub master_addr: String,
    /// `MASTER_PORT`: the port rank 0 listens on for the rendezvous, 1 to 65535.
    pub master_port: u16,
}

impl TorchrunEnv {
    /// Reads the variables from the process environment.
    pub fn from_env() -> Result<Self, BootstrapError> {
        Self::from_lookup(lookup_process_env)
    }

    /// Parses the variables from `lookup`, which returns a variable's value or `None` if unset;
    /// the pure form of [`from_env`](TorchrunEnv::from_env).
    pub fn from_lookup(mut lookup: impl FnMut(&str) -> Option<String>) -> Result<Self, BootstrapError> {
        let mut required =
            |name: &'static str| lookup(name).map(|value| (name, value)).ok_or(BootstrapError::MissingEnv { name });
        let rank = parse_usize(required(RANK)?)?;
        let world_size = parse_usize(required(WORLD_SIZE)?)?;
        let (name, master_addr) = required(MASTER_ADDR)?;
        let master_port = parse_port(required(MASTER_PORT)?)?;
        let local_rank = lookup(LOCAL_RANK).map(|value| parse_usize((LOCAL_RANK, value))).transpose()?;

        if world_size == 0 {
            return Err(invalid_env(WORLD_SIZE, "0", "the world size must be at least 1"));
        }
        if rank >= world_size {
            return Err(invalid_env(RANK, &rank.to_string(), &format!("must be below WORLD_SIZE={world_size}")));
        }
        let host = master_addr.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || host.chars().any(char::is_whitespace) {
            return Err(invalid_env(name, &master_addr, "expected a host name or IP address"));
        }
        Ok(Self { rank, world_size, local_rank, master_addr: master_addr.clone(), master_port })
    }

    /// Resolves `MASTER_ADDR:MASTER_PORT` to the address of the rendezvous root, preferring
    /// IPv4 when a name has both kinds of address.
    pub fn root_address(&self) -> Result<SocketAddr, BootstrapError> {
        let host = self.master_addr.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.master_port));
        }
        let addrs: Vec<SocketAddr> = (host, self.master_port)
            .to_socket_addrs()
            .map_err(|e| {
                BootstrapError::io(Some(self.rank), format!("resolving {MASTER_ADDR}={:?}", self.master_addr), e)
            })?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| invalid_env(MASTER_ADDR, &self.master_addr, "the name resolves to no address"))
    }

    /// The secret used when `WEFT_BOOTSTRAP_SECRET` is unset: SHA-256 of
    /// `"weft-bootstrap v1 default secret:" + MASTER_ADDR + ":" + MASTER_PORT`, over the
    /// variables exactly as written.
    ///
    /// Anyone who knows the master address can compute it, so this mode authenticates nothing:
    /// it keeps stray processes of *other* jobs out, and suits trusted clusters only. Set
    /// `WEFT_BOOTSTRAP_SECRET` (the same on every rank) where other users share the network.
    /// Every rank must spell `MASTER_ADDR` the same way.
    pub fn default_secret(&self) -> [u8; SECRET_BYTES] {
        Sha256::new()
            .chain_update(b"weft-bootstrap v1 default secret:")
            .chain_update(self.master_addr.as_bytes())
            .chain_update(b":")
            .chain_update(self.master_port.to_string().as_bytes())
            .finalize()
            .into()
    }

    /// The [`UniqueId`] of this job: the resolved root address and `secret`, or the
    /// [default secret](TorchrunEnv::default_secret) if `None`.
    pub fn unique_id(&self, secret: Option<[u8; SECRET_BYTES]>) -> Result<UniqueId, BootstrapError> {
        let address = self.root_address()?;
        UniqueId::from_parts(address, secret.unwrap_or_else(|| self.default_secret()))
    }
}

/// Reads a variable from the process environment; a value that is not UTF-8 is passed on lossily
/// (so it fails to parse, with the value shown) rather than treated as unset.
pub(crate) fn lookup_process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

/// The timeout to use: `explicit` if given, else `WEFT_BOOTSTRAP_TIMEOUT` from `lookup`, else
/// [`DEFAULT_TIMEOUT`].
pub(crate) fn resolve_timeout(
    explicit: Option<Duration>,
    lookup: impl FnOnce(&str) -> Option<String>,
) -> Result<Duration, BootstrapError> {
    if let Some(timeout) = explicit {
        if timeout.is_zero() {
            return Err(BootstrapError::InvalidConfig("the timeout must be positive".to_owned()));
        }
        return Ok(timeout);
    }
    let Some(value) = lookup(ENV_TIMEOUT) else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let seconds: f64 =
        value.parse().map_err(|_| invalid_env(ENV_TIMEOUT, &value, "expected a number of seconds, e.g. 30 or 1.5"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(invalid_env(ENV_TIMEOUT, &value, "the timeout must be positive"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| invalid_env(ENV_TIMEOUT, &value, "the timeout is too large"))
}

/// Parses `WEFT_BOOTSTRAP_SECRET` from `lookup`, if set.
pub(crate) fn secret_from(
    lookup: impl FnOnce(&str) -> Option<String>,
) -> Result<Option<[u8; SECRET_BYTES]>, BootstrapError> {
    let Some(value) = lookup(ENV_SECRET) else {
        return Ok(None);
    };
    let secret = decode_hex::<SECRET_BYTES>(&value).map_err(|reason| {
        invalid_env(ENV_SECRET, "<redacted>", &format!("expected {} hex digits: {reason}", 2 * SECRET_BYTES))
    })?;
    if secret == [0; SECRET_BYTES] {
        return Err(invalid_env(ENV_SECRET, "<redacted>", "the secret is all zero"));
    }
    Ok(Some(secret))
}

fn invalid_env(name: &'static str, value: &str, reason: &str) -> BootstrapError {
    BootstrapError::InvalidEnv { name, value: value.to_owned(), reason: reason.to_owned() }
}

fn parse_usize((name, value): (&'static str, String)) -> Result<usize, BootstrapError> {
    value.parse().map_err(|_| invalid_env(name, &value, "expected a non-negative integer"))
}

fn parse_port((name, value): (&'static str, String)) -> Result<u16, BootstrapError> {
    match value.parse::<u16>() {
        Ok(0) => Err(invalid_env(name, &value, "port 0 cannot be connected to")),
        Ok(port) => Ok(port),
        Err(_) => Err(invalid_env(name, &value, "expected a port number, 1 to 65535")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    const GOOD: &[(&str, &str)] = &[
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "10.0.0.7"),
        ("MASTER_PORT", "29500"),
    ];

    /// Variables to replace (`Some`) or remove (`None`).
    type Overrides = [(&'static str, Option<&'static str>)];

    fn with(overrides: &Overrides) -> Vec<(&'static str, &'static str)> {
        let mut vars: Vec<_> = GOOD.to_vec();
        for &(name, value) in overrides {
            vars.retain(|&(k, _)| k != name);
            if let Some(value) = value {
                vars.push((name, value));
            }
        }
        vars
    }

    #[test]
    fn parses_good_values() {
        let env = TorchrunEnv::from_lookup(lookup(GOOD)).unwrap();
        assert_eq!(
            env,
            TorchrunEnv {
                rank: 3,
                world_size: 8,
                local_rank: Some(1),
                master_addr: "10.0.0.7".to_owned(),
                master_port: 29500,
            }
        );
        assert_eq!(env.root_address().unwrap(), "10.0.0.7:29500".parse().unwrap());
        let id = env.unique_id(None).unwrap();
        assert_eq!(id.address(), "10.0.0.7:29500".parse().unwrap());
        assert_eq!(id.secret(), env.default_secret());
        assert_eq!(env.unique_id(Some([9; 32])).unwrap().secret(), [9; 32]);
    }

    #[test]
    fn local_rank_is_optional_and_ipv6_may_be_bracketed() {
        let vars = with(&[("LOCAL_RANK", None), ("MASTER_ADDR", Some("[::1]"))]);
        let env = TorchrunEnv::from_lookup(lookup(&vars)).unwrap();
        assert_eq!(env.local_rank, None);
        assert_eq!(env.root_address().unwrap(), "[::1]:29500".parse().unwrap());
        let vars = with(&[("MASTER_ADDR", Some("localhost"))]);
        let env = TorchrunEnv::from_lookup(lookup(&vars)).unwrap();
        assert!(env.root_address().unwrap().ip().is_loopback());
    }

    #[test]
    fn default_secret_depends_on_the_master_address() {
        let a = TorchrunEnv::from_lookup(lookup(GOOD)).unwrap();
        let b = TorchrunEnv::from_lookup(lookup(&with(&[("MASTER_PORT", Some("29501"))]))).unwrap();
        let c = TorchrunEnv::from_lookup(lookup(&with(&[("RANK", Some("0"))]))).unwrap();
        assert_ne!(a.default_secret(), b.default_secret());
        assert_eq!(a.default_secret(), c.default_secret());
    }

    #[test]
    fn rejects_bad_values() {
        let cases: &[(&Overrides, &str)] = &[
            (&[("RANK", None)], "RANK is not set"),
            (&[("WORLD_SIZE", None)], "WORLD_SIZE is not set"),
            (&[("MASTER_ADDR", None)], "MASTER_ADDR is not set"),
            (&[("MASTER_PORT", None)], "MASTER_PORT is not set"),
            (&[("RANK", Some("-1"))], "RANK=\"-1\""),
            (&[("RANK", Some("one"))], "non-negative integer"),
            (&[("RANK", Some(" 3"))], "RANK=\" 3\""),
            (&[("RANK", Some("8"))], "must be below WORLD_SIZE=8"),
            (&[("WORLD_SIZE", Some("0")), ("RANK", Some("0"))], "at least 1"),
            (&[("WORLD_SIZE", Some(""))], "WORLD_SIZE=\"\""),
            (&[("LOCAL_RANK", Some("x"))], "LOCAL_RANK"),
            (&[("MASTER_PORT", Some("0"))], "port 0"),
            (&[("MASTER_PORT", Some("65536"))], "1 to 65535"),
            (&[("MASTER_PORT", Some("http"))], "1 to 65535"),
            (&[("MASTER_ADDR", Some(""))], "host name or IP"),
            (&[("MASTER_ADDR", Some("a b"))], "host name or IP"),
        ];
        for (overrides, needle) in cases {
            let err = TorchrunEnv::from_lookup(lookup(&with(overrides))).unwrap_err();
            assert!(err.to_string().contains(needle), "{overrides:?}: {err} lacks {needle:?}");
        }
    }

    #[test]
    fn timeout_resolution() {
        let none = |_: &str| None;
        let env = |v: &'static str| move |name: &str| (name == ENV_TIMEOUT).then(|| v.to_owned());
        assert_eq!(resolve_timeout(None, none).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(resolve_timeout(None, env("5")).unwrap(), Duration::from_secs(5));
        assert_eq!(resolve_timeout(None, env("1.5")).unwrap(), Duration::from_millis(1500));
        // An explicit value wins over the environment, even a bad one.
        assert_eq!(resolve_timeout(Some(Duration::from_secs(2)), env("junk")).unwrap(), Duration::from_secs(2));
        for bad in ["0", "-1", "abc", "", "NaN", "inf", "1e300"] {
            let err = resolve_timeout(None, env(bad)).unwrap_err();
            assert!(matches!(err, BootstrapError::InvalidEnv { name: ENV_TIMEOUT, .. }), "{bad:?}: {err}");
        }
        assert!(matches!(resolve_timeout(Some(Duration::ZERO), none), Err(BootstrapError::InvalidConfig(_))));
    }

    #[test]
    fn secret_parsing() {
        let env = |v: &'static str| move |name: &str| (name == ENV_SECRET).then(|| v.to_owned());
        assert_eq!(secret_from(|_| None).unwrap(), None);
        let hex = "ab".repeat(32);
        let hex: &'static str = Box::leak(hex.into_boxed_str());
        assert_eq!(secret_from(env(hex)).unwrap(), Some([0xab; 32]));
        for bad in ["ab", "zz".repeat(32).leak(), "00".repeat(32).leak()] {
            let err = secret_from(env(bad)).unwrap_err();
            assert!(matches!(err, BootstrapError::InvalidEnv { name: ENV_SECRET, .. }));
            // The secret never appears in the error.
            assert!(!err.to_string().contains(bad) || bad.len() < 8, "{err}");
        }
    }
}
