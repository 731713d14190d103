//! The variables weft-nccl reads, once per process, from weft-core's [`weft_core::Env`]:
//! `WEFT_NCCL_FALLBACK_LIB`, `WEFT_NCCL_FORCE_FALLBACK`, `WEFT_NCCL_ROOT_IP`, `WEFT_NCCL_LOG`
//! (else `WEFT_LOG`). Their meanings and defaults are in weft-core's table of variables
//! (`weft_core::env::vars`, and `docs/env.md` generated from it).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::sync::OnceLock;

use weft_core::env::vars;
use weft_types::Collective;

use crate::error::NcclError;

/// The operations a route is decided for: weft's collectives (one vocabulary, from
/// weft-types), the two entry points of the C API that weft lowers to point-to-point
/// transfers, and the device API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A collective of weft's own (`ncclBcast` is a broadcast, `ncclSend`/`ncclRecv` a send/receive).
    Collective(Collective),
    /// `ncclGather`.
    Gather,
    /// `ncclScatter`.
    Scatter,
    /// The device API: `ncclDevCommCreate`, `ncclDevCommDestroy` and the calls that name a
    /// communicator (`crate::device_api`).
    DevComm,
}

impl Kind {
    /// `ncclAllReduce`.
    pub const ALL_REDUCE: Kind = Kind::Collective(Collective::AllReduce);
    /// `ncclAllGather`.
    pub const ALL_GATHER: Kind = Kind::Collective(Collective::AllGather);
    /// `ncclReduceScatter`.
    pub const REDUCE_SCATTER: Kind = Kind::Collective(Collective::ReduceScatter);
    /// `ncclBroadcast` and `ncclBcast`.
    pub const BROADCAST: Kind = Kind::Collective(Collective::Broadcast);
    /// `ncclReduce`.
    pub const REDUCE: Kind = Kind::Collective(Collective::Reduce);
    /// `ncclAlltoAll`.
    pub const ALL_TO_ALL: Kind = Kind::Collective(Collective::AllToAll);
    /// `ncclSend` and `ncclRecv`.
    pub const SEND_RECV: Kind = Kind::Collective(Collective::SendRecv);

    /// Every kind: weft's collectives, then gather, scatter and the device API.
    pub fn all() -> impl Iterator<Item = Kind> {
        Collective::ALL.into_iter().map(Kind::Collective).chain([Kind::Gather, Kind::Scatter, Kind::DevComm])
    }

    /// The name `WEFT_NCCL_FORCE_FALLBACK` uses (a collective's own name).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Collective(c) => c.name(),
            Kind::Gather => "gather",
            Kind::Scatter => "scatter",
            Kind::DevComm => "devcomm",
        }
    }

    /// The kind's bit in a [`ForceSet`]: its place in [`Kind::all`].
    fn bit(self) -> u16 {
        let index = Kind::all().position(|k| k == self).unwrap_or(0);
        1 << index
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A malformed weft-nccl variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NcclEnvError {
    /// A variable weft-core parses.
    #[error(transparent)]
    Weft(#[from] weft_core::EnvError),
    /// `WEFT_NCCL_FORCE_FALLBACK` names no collective.
    #[error("WEFT_NCCL_FORCE_FALLBACK: {0}")]
    ForceFallback(#[from] UnknownCollective),
    /// `WEFT_NCCL_ROOT_IP` is no IP address.
    #[error("WEFT_NCCL_ROOT_IP={value:?}: expected an IP address")]
    RootIp {
        /// The value.
        value: String,
    },
}

/// A word of a [`ForceSet`] list that names no collective.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown collective {name:?}: expected all or {}", Kind::all().map(Kind::name).collect::<Vec<_>>().join(", "))]
pub struct UnknownCollective {
    /// The word.
    pub name: String,
}

/// The kinds `WEFT_NCCL_FORCE_FALLBACK` sends to the fallback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForceSet(u16);

impl ForceSet {
    /// Parses `allgather,reduce`, `all` or an empty string (case and spaces ignored;
    /// `bcast`, `send` and `recv` are accepted as names of their kinds).
    pub fn parse(text: &str) -> Result<Self, UnknownCollective> {
        let mut set = 0u16;
        for word in text.split(',').map(|w| w.trim().to_ascii_lowercase()).filter(|w| !w.is_empty()) {
            let kinds: Vec<Kind> = match word.as_str() {
                "all" => Kind::all().collect(),
                "bcast" => vec![Kind::BROADCAST],
                "send" | "recv" => vec![Kind::SEND_RECV],
                name => match Kind::all().find(|k| k.name() == name) {
                    Some(k) => vec![k],
                    None => return Err(UnknownCollective { name: name.into() }),
                },
            };
            set |= kinds.iter().fold(0, |s, k| s | k.bit());
        }
        Ok(Self(set))
    }

    /// Whether `kind` is forced to the fallback.
    pub fn contains(self, kind: Kind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The set as bits (every rank compares them at init).
    pub fn bits(self) -> u16 {
        self.0
    }
}

/// weft-nccl's configuration.
#[derive(Clone, Debug)]
pub struct NcclEnv {
    /// weft's own configuration (timeouts, cache, tuning).
    pub weft: weft_core::Env,
    /// `WEFT_NCCL_FALLBACK_LIB`.
    pub fallback_lib: Option<PathBuf>,
    /// `WEFT_NCCL_FORCE_FALLBACK`.
    pub force: ForceSet,
    /// `WEFT_NCCL_ROOT_IP`.
    pub root_ip: Option<IpAddr>,
    /// `WEFT_NCCL_LOG`.
    pub log: Option<String>,
}

impl NcclEnv {
    /// Parses weft-nccl's variables out of `weft`.
    pub fn from_weft(weft: weft_core::Env) -> Result<Self, NcclEnvError> {
        let fallback_lib = weft.var(&vars::WEFT_NCCL_FALLBACK_LIB).filter(|p| !p.trim().is_empty()).map(PathBuf::from);
        let force = ForceSet::parse(weft.var(&vars::WEFT_NCCL_FORCE_FALLBACK).unwrap_or(""))?;
        let root_ip = match weft.var(&vars::WEFT_NCCL_ROOT_IP).map(str::trim).filter(|v| !v.is_empty()) {
            Some(v) => Some(v.parse::<IpAddr>().map_err(|_| NcclEnvError::RootIp { value: v.into() })?),
            None => None,
        };
        let log = [vars::WEFT_NCCL_LOG, vars::WEFT_LOG]
            .iter()
            .find_map(|variable| weft.var(variable).filter(|v| !v.trim().is_empty()))
            .map(str::to_string);
        Ok(Self { weft, fallback_lib, force, root_ip, log })
    }

    /// The IP `ncclGetUniqueId` advertises.
    pub fn root_ip(&self) -> IpAddr {
        self.root_ip.unwrap_or_else(default_route_ip)
    }
}

/// The local address of the interface that routes to the outside (no packet is sent: a UDP
/// `connect` only picks the route), or loopback when there is none.
fn default_route_ip() -> IpAddr {
    let probe = || -> std::io::Result<IpAddr> {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        socket.connect((Ipv4Addr::new(192, 0, 2, 1), 9))?;
        Ok(socket.local_addr()?.ip())
    };
    probe().ok().filter(|ip| !ip.is_unspecified()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The process's configuration, read on first use.
pub fn env() -> Result<&'static NcclEnv, NcclError> {
    static ENV: OnceLock<Result<NcclEnv, NcclEnvError>> = OnceLock::new();
    ENV.get_or_init(|| NcclEnv::from_weft(weft_core::Env::from_process()?)).as_ref().map_err(|e| e.clone().into())
}

/// Installs a stderr logger with `WEFT_NCCL_LOG`'s filter (else `WEFT_LOG`'s), once, if one is set and the
/// process has no `tracing` subscriber yet.
pub fn init_logging() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if let Ok(NcclEnv { log: Some(filter), .. }) = env() {
            let filter = tracing_subscriber::EnvFilter::try_new(filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("debug"));
            let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nccl_env(pairs: &[(&str, &str)]) -> Result<NcclEnv, String> {
        let weft = weft_core::Env::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap();
        NcclEnv::from_weft(weft).map_err(|e| e.to_string())
    }

    #[test]
    fn force_fallback_lists_parse() {
        let set = ForceSet::parse(" AllGather, reduce ,,").unwrap();
        assert!(set.contains(Kind::ALL_GATHER) && set.contains(Kind::REDUCE));
        assert!(!set.contains(Kind::ALL_REDUCE) && !set.contains(Kind::REDUCE_SCATTER));
        let all = ForceSet::parse("all").unwrap();
        assert!(Kind::all().all(|k| all.contains(k)));
        // One bit per kind: weft's seven collectives, gather, scatter and the device API.
        assert_eq!(all.bits().count_ones(), 10);
        let gs = ForceSet::parse("gather,scatter").unwrap();
        assert!(gs.contains(Kind::Gather) && gs.contains(Kind::Scatter) && !gs.contains(Kind::SEND_RECV));
        assert!(!gs.contains(Kind::DevComm) && ForceSet::parse("devcomm").unwrap().contains(Kind::DevComm));
        assert_eq!(ForceSet::parse("").unwrap(), ForceSet::default());
        assert!(ForceSet::parse("bcast,send").unwrap().contains(Kind::BROADCAST));
        assert!(ForceSet::parse("send").unwrap().contains(Kind::SEND_RECV));
        let err = ForceSet::parse("allgather,ring").unwrap_err().to_string();
        assert!(err.contains("\"ring\"") && err.contains("reducescatter"));
    }

    #[test]
    fn variables_parse_once_into_typed_fields() {
        let e = nccl_env(&[
            ("WEFT_NCCL_FALLBACK_LIB", "/opt/nccl/libnccl.so.2"),
            ("WEFT_NCCL_FORCE_FALLBACK", "alltoall"),
            ("WEFT_NCCL_ROOT_IP", "10.0.0.7"),
        ])
        .unwrap();
        assert_eq!(e.fallback_lib, Some(PathBuf::from("/opt/nccl/libnccl.so.2")));
        assert!(e.force.contains(Kind::ALL_TO_ALL));
        assert_eq!(e.root_ip(), "10.0.0.7".parse::<IpAddr>().unwrap());
        let d = nccl_env(&[("WEFT_NCCL_FALLBACK_LIB", " ")]).unwrap();
        assert_eq!(d.fallback_lib, None);
        assert!(!d.root_ip().is_unspecified());
        assert!(
            nccl_env(&[("WEFT_NCCL_FORCE_FALLBACK", "everything")]).unwrap_err().contains("WEFT_NCCL_FORCE_FALLBACK")
        );
        assert!(nccl_env(&[("WEFT_NCCL_ROOT_IP", "host")]).unwrap_err().contains("WEFT_NCCL_ROOT_IP"));
        // weft's own WEFT_LOG turns the library's log on; WEFT_NCCL_LOG wins.
        assert_eq!(nccl_env(&[("WEFT_LOG", "info")]).unwrap().log.as_deref(), Some("info"));
        let both = nccl_env(&[("WEFT_LOG", "info"), ("WEFT_NCCL_LOG", "debug")]).unwrap();
        assert_eq!(both.log.as_deref(), Some("debug"));
        assert_eq!(d.log, None);
    }
}
