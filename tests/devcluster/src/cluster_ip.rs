//! The Service ClusterIP allocator, pure: which IPv4 address of the service range a
//! Service gets, given the addresses already held. What kube-apiserver 1.33's
//! `pkg/registry/core/service/ipallocator` does for one IPv4 range: the network
//! and broadcast addresses are never handed out; a dynamic allocation starts at a
//! random point of the upper band and falls back to the lower band, kept for
//! static (requested) addresses (KEP-3070); the errors carry its texts.
//!
//! The held addresses are read from the stored Services by the caller
//! (`service.rs`), so nothing here keeps state.

use std::collections::HashSet;
use std::net::Ipv4Addr;

/// The service CIDR: kubeadm's default `--service-cluster-ip-range` (kind's too).
pub const SERVICE_CIDR: Range = Range::new(Ipv4Addr::new(10, 96, 0, 0), 12);

/// An IPv4 service range (a prefix of 8 to 28 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    base: u32,
    bits: u8,
}

/// Why an address could not be allocated (`ipallocator.Err*`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The requested address is held by another Service.
    #[error("provided IP is already allocated")]
    Allocated,
    /// The requested address is the range's network or broadcast address.
    #[error("provided IP {0} is not in the valid range")]
    NotInRange(Ipv4Addr),
    /// The requested address is outside every service range.
    #[error("the provided network does not match the current range")]
    MismatchedNetwork,
    /// Every address is held.
    #[error("range is full")]
    Full,
}

impl Range {
    /// The range of `net`/`bits` (host bits of `net` are ignored).
    pub const fn new(net: Ipv4Addr, bits: u8) -> Range {
        assert!(bits >= 8 && bits <= 28, "prefix length out of bounds");
        let mask = u32::MAX << (32 - bits);
        Range {
            base: net.to_bits() & mask,
            bits,
        }
    }

    /// The network address, e.g. 10.96.0.0.
    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from_bits(self.base)
    }

    fn size(&self) -> u32 {
        1 << (32 - self.bits)
    }

    /// The first address a Service may get (the network address + 1).
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from_bits(self.base + 1)
    }

    /// The last address a Service may get (the broadcast address - 1).
    pub fn last(&self) -> Ipv4Addr {
        Ipv4Addr::from_bits(self.base + self.size() - 2)
    }

    /// True when `ip` is inside the prefix (network and broadcast included).
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        ip.to_bits() & (u32::MAX << (32 - self.bits)) == self.base
    }

    /// How many addresses from the first are kept for static allocation
    /// (`calculateRangeOffset`: min(max(16, size/16), 256), 0 for tiny ranges).
    fn static_band(&self) -> u32 {
        let size = self.size();
        if size <= 16 {
            0
        } else {
            (size / 16).clamp(16, 256)
        }
    }
}

/// Takes the requested `ip` (a Service that names its ClusterIP).
pub fn claim(range: &Range, used: &HashSet<Ipv4Addr>, ip: Ipv4Addr) -> Result<(), AllocError> {
    check_range(range, ip)?;
    if used.contains(&ip) {
        return Err(AllocError::Allocated);
    }
    Ok(())
}

/// What a dry run of [`claim`] checks: only the range, as kube's dry-run
/// allocator does (it cannot see allocations it does not make).
pub fn check_range(range: &Range, ip: Ipv4Addr) -> Result<(), AllocError> {
    if !range.contains(ip) {
        return Err(AllocError::MismatchedNetwork);
    }
    if ip < range.first() || ip > range.last() {
        return Err(AllocError::NotInRange(ip));
    }
    Ok(())
}

/// A free address: the first free one from `seed`'s point of the upper band
/// (wrapping), else from another point of the lower band.
pub fn next_free(
    range: &Range,
    used: &HashSet<Ipv4Addr>,
    seed: u64,
) -> Result<Ipv4Addr, AllocError> {
    let first = range.first().to_bits();
    let last = range.last().to_bits();
    let band = range.static_band();
    let upper = (first + band, last);
    let lower = (first, first + band.saturating_sub(1));
    let free_from = |(lo, hi): (u32, u32), seed: u64| -> Option<Ipv4Addr> {
        let len = u64::from(hi - lo) + 1;
        let start = seed % len;
        (0..len)
            .map(|i| Ipv4Addr::from_bits(lo + u32::try_from((start + i) % len).unwrap_or(0)))
            .find(|ip| !used.contains(ip))
    };
    if let Some(ip) = free_from(upper, seed) {
        return Ok(ip);
    }
    if band > 0 {
        if let Some(ip) = free_from(lower, seed.rotate_left(32)) {
            return Ok(ip);
        }
    }
    Err(AllocError::Full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::KUBERNETES_CLUSTER_IP;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn the_kubeadm_range_and_the_kubernetes_service_in_it() {
        assert_eq!(SERVICE_CIDR.network(), ip("10.96.0.0"));
        assert!(SERVICE_CIDR.contains(ip("10.111.255.255")));
        assert!(!SERVICE_CIDR.contains(ip("10.112.0.0")));
        assert_eq!(SERVICE_CIDR.first(), ip("10.96.0.1"));
        assert_eq!(SERVICE_CIDR.last(), ip("10.111.255.254"));
        // kube gives `default/kubernetes` the first address of the range.
        assert_eq!(ip(KUBERNETES_CLUSTER_IP), SERVICE_CIDR.first());
        assert_eq!(SERVICE_CIDR.static_band(), 256);
        assert_eq!(Range::new(ip("10.0.0.0"), 24).static_band(), 16);
        assert_eq!(Range::new(ip("10.0.0.0"), 28).static_band(), 0);
        assert_eq!(Range::new(ip("10.0.0.77"), 24).network(), ip("10.0.0.0"));
    }

    #[test]
    fn dynamic_addresses_come_from_the_upper_band_and_skip_held_ones() {
        let used = HashSet::new();
        for seed in [0, 1, 7, u64::MAX, 123_456_789] {
            let got = next_free(&SERVICE_CIDR, &used, seed).unwrap();
            assert!(
                got >= ip("10.96.1.1") && got <= SERVICE_CIDR.last(),
                "{got}"
            );
        }
        assert_eq!(next_free(&SERVICE_CIDR, &used, 0).unwrap(), ip("10.96.1.1"));
        let used: HashSet<_> = [ip("10.96.1.1"), ip("10.96.1.2")].into();
        assert_eq!(next_free(&SERVICE_CIDR, &used, 0).unwrap(), ip("10.96.1.3"));
        // Wraps from the top of the upper band to its start.
        let top = u64::from(SERVICE_CIDR.last().to_bits() - ip("10.96.1.1").to_bits());
        let used: HashSet<_> = [SERVICE_CIDR.last()].into();
        assert_eq!(
            next_free(&SERVICE_CIDR, &used, top).unwrap(),
            ip("10.96.1.1")
        );
    }

    #[test]
    fn the_lower_band_is_used_when_the_upper_is_full_then_the_range_is() {
        let range = Range::new(ip("192.168.7.0"), 24);
        // Usable: .1-.254; static band .1-.16; upper .17-.254.
        let mut used: HashSet<Ipv4Addr> =
            (17..=254).map(|i| ip(&format!("192.168.7.{i}"))).collect();
        let got = next_free(&range, &used, 3).unwrap();
        assert!(
            got >= ip("192.168.7.1") && got <= ip("192.168.7.16"),
            "{got}"
        );
        used.extend((1..=16).map(|i| ip(&format!("192.168.7.{i}"))));
        assert_eq!(next_free(&range, &used, 3), Err(AllocError::Full));
        assert_eq!(AllocError::Full.to_string(), "range is full");
    }

    #[test]
    fn a_requested_address_must_be_free_and_in_range() {
        let used: HashSet<_> = [ip("10.96.0.10")].into();
        assert_eq!(claim(&SERVICE_CIDR, &used, ip("10.96.0.11")), Ok(()));
        let held = claim(&SERVICE_CIDR, &used, ip("10.96.0.10")).unwrap_err();
        assert_eq!(held.to_string(), "provided IP is already allocated");
        let outside = claim(&SERVICE_CIDR, &used, ip("192.168.0.1")).unwrap_err();
        assert_eq!(
            outside.to_string(),
            "the provided network does not match the current range"
        );
        assert_eq!(
            claim(&SERVICE_CIDR, &used, ip("10.112.0.1")),
            Err(AllocError::MismatchedNetwork)
        );
        let network = claim(&SERVICE_CIDR, &used, ip("10.96.0.0")).unwrap_err();
        assert_eq!(
            network.to_string(),
            "provided IP 10.96.0.0 is not in the valid range"
        );
        assert_eq!(
            claim(&SERVICE_CIDR, &used, ip("10.111.255.255")),
            Err(AllocError::NotInRange(ip("10.111.255.255")))
        );
        // A dry run cannot see what is held, only the range.
        assert_eq!(check_range(&SERVICE_CIDR, ip("10.96.0.10")), Ok(()));
    }
}
