//! Who we are: host and process identities that decide the "same host" and "same process" fast
//! paths, robust to containers (boot id and pid namespace are part of them).

/// Identity of this process as peers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    /// Hash of hostname and boot id.
    pub host_hash: u64,
    /// Hash of the host hash, pid and pid namespace.
    pub pid_hash: u64,
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

impl ProcessIdentity {
    /// The identity of the calling process.
    pub fn current() -> Self {
        let hostname = read_trimmed("/proc/sys/kernel/hostname");
        let boot_id = read_trimmed("/proc/sys/kernel/random/boot_id");
        let host_hash = fnv1a(&[hostname.as_bytes(), boot_id.as_bytes()]);
        let pid_ns = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
        let pid = std::process::id().to_le_bytes();
        let pid_hash = fnv1a(&[&host_hash.to_le_bytes(), &pid, pid_ns.as_bytes()]);
        Self { host_hash, pid_hash }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_stable_within_a_process_and_hashes_differ_by_input() {
        assert_eq!(ProcessIdentity::current(), ProcessIdentity::current());
        assert_ne!(fnv1a(&[b"a", b"bc"]), fnv1a(&[b"ab", b"c"]));
    }
}
