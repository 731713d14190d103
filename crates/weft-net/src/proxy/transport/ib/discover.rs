//! Which RDMA device, port and GID a rank uses when `WEFT_IB_*` does not say, read from sysfs
//! (as NCCL does): the NIC nearest its GPU on the PCI tree, the first active port, and on RoCE
//! the first RoCE v2 GID holding an IPv4-mapped address (routable, what switches expect).
//!
//! Every function takes the sysfs root, so tests run on a tree of their own.

use std::path::{Path, PathBuf};

/// An RDMA device as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicInfo {
    /// Device name (`mlx5_0`).
    pub name: String,
    /// Its PCI device's path under `devices/` (symlinks resolved), if it has one.
    pub pci_path: Option<PathBuf>,
    /// Ports whose state is ACTIVE, in order.
    pub active_ports: Vec<u8>,
}

/// The RDMA devices under `sysfs/class/infiniband`, by name.
pub fn list_nics(sysfs: &Path) -> Vec<NicInfo> {
    let Ok(entries) = std::fs::read_dir(sysfs.join("class/infiniband")) else { return Vec::new() };
    let mut nics: Vec<NicInfo> = entries
        .flatten()
        .map(|e| {
            let dir = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let pci_path = std::fs::canonicalize(dir.join("device")).ok();
            let mut active_ports: Vec<u8> = std::fs::read_dir(dir.join("ports"))
                .map(|ports| {
                    ports
                        .flatten()
                        .filter_map(|p| p.file_name().to_str()?.parse::<u8>().ok())
                        .filter(|p| port_active(&dir, *p))
                        .collect()
                })
                .unwrap_or_default();
            active_ports.sort_unstable();
            NicInfo { name, pci_path, active_ports }
        })
        .collect();
    nics.sort_by(|a, b| a.name.cmp(&b.name));
    nics
}

/// Whether sysfs reports port `port` of the device at `dir` ACTIVE (`4: ACTIVE`).
fn port_active(dir: &Path, port: u8) -> bool {
    std::fs::read_to_string(dir.join(format!("ports/{port}/state"))).is_ok_and(|s| s.trim().ends_with("ACTIVE"))
}

/// The PCI path of the GPU with bus id `bus_id` (`0000:1B:00.0`), symlinks resolved.
pub fn gpu_pci_path(sysfs: &Path, bus_id: &str) -> Option<PathBuf> {
    std::fs::canonicalize(sysfs.join("bus/pci/devices").join(bus_id.to_ascii_lowercase())).ok()
}

/// How many leading path components `a` and `b` share: the deeper, the nearer on the PCI tree
/// (same root complex, same switch, ...).
fn shared_depth(a: &Path, b: &Path) -> usize {
    a.components().zip(b.components()).take_while(|(x, y)| x == y).count()
}

/// The NIC with an active port nearest the GPU at `gpu` (deepest shared PCI path). Among
/// equally near NICs, `spread` (e.g. the GPU ordinal) picks one round-robin, so GPUs that share
/// a switch with several NICs use different ones. Without a GPU path, all NICs are equally near.
pub fn nearest_nic<'a>(nics: &'a [NicInfo], gpu: Option<&Path>, spread: usize) -> Option<&'a NicInfo> {
    let usable: Vec<&NicInfo> = nics.iter().filter(|n| !n.active_ports.is_empty()).collect();
    let depth = |n: &NicInfo| match (gpu, &n.pci_path) {
        (Some(g), Some(p)) => shared_depth(g, p),
        _ => 0,
    };
    let best = usable.iter().map(|n| depth(n)).max()?;
    let nearest: Vec<&NicInfo> = usable.into_iter().filter(|n| depth(n) == best).collect();
    Some(nearest[spread % nearest.len()])
}

/// The first GID index of `device`'s `port` whose type is RoCE v2 and whose address is
/// IPv4-mapped (`::ffff:a.b.c.d`); `None` on InfiniBand or when there is none.
pub fn roce_v2_gid_index(sysfs: &Path, device: &str, port: u8) -> Option<u8> {
    let dir = sysfs.join(format!("class/infiniband/{device}/ports/{port}"));
    (0..=u8::MAX).take_while(|i| dir.join(format!("gids/{i}")).exists()).find(|i| {
        let kind = std::fs::read_to_string(dir.join(format!("gid_attrs/types/{i}"))).unwrap_or_default();
        let gid = std::fs::read_to_string(dir.join(format!("gids/{i}"))).unwrap_or_default();
        kind.trim().eq_ignore_ascii_case("RoCE v2") && gid.trim().starts_with("0000:0000:0000:0000:0000:ffff:")
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree: two root complexes; GPU 0 and mlx5_0 under switch A of root 0, GPU 1 and
    /// mlx5_1 under switch B of root 0, GPU 2 under root 1 with no NIC; mlx5_2 under root 1 has
    /// no active port.
    fn tree() -> tempdir::Dir {
        let d = tempdir::Dir::new();
        let root = d.path();
        let dev = |p: &str| {
            let path = root.join("devices").join(p);
            std::fs::create_dir_all(&path).unwrap();
            path
        };
        let gpu = |bus: &str, p: &str| {
            let target = dev(p);
            std::fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            symlink(target, root.join("bus/pci/devices").join(bus)).unwrap();
        };
        gpu("0000:1b:00.0", "pci0000:00/0000:00:01.0/0000:10:00.0/0000:1b:00.0");
        gpu("0000:2b:00.0", "pci0000:00/0000:00:02.0/0000:20:00.0/0000:2b:00.0");
        gpu("0000:9b:00.0", "pci0000:80/0000:80:01.0/0000:9b:00.0");
        let nic = |name: &str, p: &str, states: &[(u8, &str)]| {
            let dir = root.join("class/infiniband").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            symlink(dev(p), dir.join("device")).unwrap();
            for (port, state) in states {
                let port_dir = dir.join(format!("ports/{port}"));
                std::fs::create_dir_all(port_dir.join("gids")).unwrap();
                std::fs::create_dir_all(port_dir.join("gid_attrs/types")).unwrap();
                std::fs::write(port_dir.join("state"), format!("{state}\n")).unwrap();
            }
        };
        nic("mlx5_0", "pci0000:00/0000:00:01.0/0000:10:00.0/0000:1c:00.0", &[(1, "4: ACTIVE")]);
        nic("mlx5_1", "pci0000:00/0000:00:02.0/0000:20:00.0/0000:2c:00.0", &[(1, "1: DOWN"), (2, "4: ACTIVE")]);
        nic("mlx5_2", "pci0000:80/0000:80:01.0/0000:9c:00.0", &[(1, "1: DOWN")]);
        d
    }

    /// A temporary folder removed on drop.
    mod tempdir {
        pub(super) struct Dir(std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Self {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p = std::env::temp_dir().join(format!("weft-sysfs-{}-{n}", std::process::id()));
                let _ = std::fs::remove_dir_all(&p);
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
            pub(super) fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn devices_list_with_their_active_ports() {
        let d = tree();
        let nics = list_nics(d.path());
        let names: Vec<(&str, &[u8])> = nics.iter().map(|n| (n.name.as_str(), n.active_ports.as_slice())).collect();
        assert_eq!(names, [("mlx5_0", &[1u8][..]), ("mlx5_1", &[2][..]), ("mlx5_2", &[][..])]);
        assert!(nics[0].pci_path.as_ref().unwrap().ends_with("0000:1c:00.0"));
        assert!(list_nics(&d.path().join("nowhere")).is_empty());
    }

    #[test]
    fn each_gpu_takes_the_nic_behind_its_own_switch() {
        let d = tree();
        let nics = list_nics(d.path());
        let pick = |bus: &str| {
            let gpu = gpu_pci_path(d.path(), bus);
            nearest_nic(&nics, gpu.as_deref(), 0).map(|n| n.name.clone())
        };
        assert_eq!(pick("0000:1B:00.0").as_deref(), Some("mlx5_0"), "bus ids are matched in lower case");
        assert_eq!(pick("0000:2b:00.0").as_deref(), Some("mlx5_1"));
        // The NIC of root 1 has no active port: the GPU there takes one of root 0's.
        assert_eq!(pick("0000:9b:00.0").as_deref(), Some("mlx5_0"));
        // Unknown GPU: every usable NIC is as near, spread by the caller's index.
        let spread: Vec<String> = (0..3).map(|i| nearest_nic(&nics, None, i).unwrap().name.clone()).collect();
        assert_eq!(spread, ["mlx5_0", "mlx5_1", "mlx5_0"]);
        assert_eq!(nearest_nic(&nics[2..], None, 0), None, "no NIC with an active port");
    }

    #[test]
    fn roce_picks_the_first_v2_gid_with_an_ipv4_address() {
        let d = tree();
        let port = d.path().join("class/infiniband/mlx5_1/ports/2");
        let gid = |i: u8, kind: &str, value: &str| {
            std::fs::write(port.join(format!("gids/{i}")), format!("{value}\n")).unwrap();
            std::fs::write(port.join(format!("gid_attrs/types/{i}")), format!("{kind}\n")).unwrap();
        };
        assert_eq!(roce_v2_gid_index(d.path(), "mlx5_1", 2), None);
        gid(0, "IB/RoCE v1", "fe80:0000:0000:0000:0a00:27ff:fe00:0001");
        gid(1, "RoCE v2", "fe80:0000:0000:0000:0a00:27ff:fe00:0001");
        gid(2, "IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a00:0005");
        assert_eq!(roce_v2_gid_index(d.path(), "mlx5_1", 2), None, "link-local v2 and a v1 IPv4 GID do not count");
        gid(3, "RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0005");
        assert_eq!(roce_v2_gid_index(d.path(), "mlx5_1", 2), Some(3));
    }
}
