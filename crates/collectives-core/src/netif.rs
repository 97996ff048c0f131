//! The network interfaces of this host, and which of them NCCL's socket code and Open MPI's TCP
//! transports would take.
//!
//! The choosing rules are pure functions over a list of [`Interface`]s, so they can be tested on
//! made-up machines; [`interfaces`] reads the real list with `getifaddrs(3)`, in its order (the
//! order NCCL walks).
//!
//! | rule | function | what it follows |
//! |---|---|---|
//! | NCCL (bootstrap and socket transport) | [`nccl_choice`] | `ncclFindInterfaces`: `NCCL_SOCKET_IFNAME` (`^` excludes, `=` matches names exactly, else prefixes) when set; otherwise `ib*`, then anything but `docker*` and `lo*`, then `docker*`, then `lo*` |
//! | Open MPI's TCP byte transfer layer | [`ompi_tcp_btl`] | `btl_tcp_if_include` / `btl_tcp_if_exclude` (default exclude `127.0.0.1/8,sppp`) over the interfaces that are up |
//! | Open MPI's out-of-band channel | [`ompi_tcp_oob`] | `oob_tcp_if_include` / `oob_tcp_if_exclude` (no default), loopback only when nothing else is up |
//!
//! [`warnings`] names the interfaces that are up but usually lead nowhere (`docker*`, `veth*`,
//! `virbr*`) and more than one routable interface; [`pin`] gives the settings that pin all three to
//! one interface.

use std::net::IpAddr;

/// Name prefixes of interfaces that are up on many machines but reach no other node: container
/// bridges and their pairs, and libvirt's bridge.
pub const DECOYS: [&str; 3] = ["docker", "veth", "virbr"];

/// Open MPI 4.1's default `btl_tcp_if_exclude`.
pub const OMPI_BTL_DEFAULT_EXCLUDE: &str = "127.0.0.1/8,sppp";

/// One network interface and its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`eth0`, `ib0`, `docker0`).
    pub name: String,
    /// Whether it is up (`IFF_UP`).
    pub up: bool,
    /// Whether it is a loopback interface (`IFF_LOOPBACK`).
    pub loopback: bool,
    /// Its IPv4 and IPv6 addresses with their prefix lengths, in `getifaddrs` order.
    pub addrs: Vec<(IpAddr, u8)>,
}

impl Interface {
    /// Whether its name marks it as one that usually leads nowhere (see [`DECOYS`]).
    pub fn is_decoy(&self) -> bool {
        DECOYS.iter().any(|p| self.name.starts_with(p))
    }

    /// Whether another host could reach it: up, not loopback, with an IPv4 address that is not
    /// link-local or an IPv6 address that is neither link-local nor loopback.
    pub fn routable(&self) -> bool {
        self.up
            && !self.loopback
            && self.addrs.iter().any(|(a, _)| match a {
                IpAddr::V4(v4) => !v4.is_loopback() && !v4.is_link_local(),
                IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
            })
    }

    /// The first IPv4 address, else the first address.
    pub fn main_addr(&self) -> Option<(IpAddr, u8)> {
        self.addrs
            .iter()
            .find(|(a, _)| a.is_ipv4())
            .or_else(|| self.addrs.first())
            .copied()
    }

    /// Its addresses as `a.b.c.d/n`, separated by spaces.
    pub fn addr_list(&self) -> String {
        self.addrs
            .iter()
            .map(|(a, p)| format!("{a}/{p}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Which interfaces NCCL would take, and by which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclChoice {
    /// The rule that chose: `NCCL_SOCKET_IFNAME=...`, or the default step that found something
    /// (`ib`, `^docker,lo`, `docker`, `lo`).
    pub rule: String,
    /// The interfaces with the address NCCL would use on each, in NCCL's order; the bootstrap uses
    /// the first. Empty when nothing matches (NCCL then fails: "no socket interface found").
    pub chosen: Vec<(String, IpAddr)>,
}

impl NcclChoice {
    /// The interface the bootstrap connects over, when there is one.
    pub fn bootstrap(&self) -> Option<&(String, IpAddr)> {
        self.chosen.first()
    }
}

/// Whether `name` matches an `NCCL_SOCKET_IFNAME`-style list (after its `^` was taken off):
/// `exact` compares whole names (`=`), otherwise each entry is a prefix. A `:port` suffix of an
/// entry is ignored, as NCCL ignores it for matching. An empty list matches everything.
fn nccl_list_matches(name: &str, list: &str, exact: bool) -> bool {
    let entries: Vec<&str> = list
        .split(',')
        .map(|e| e.split(':').next().unwrap_or(""))
        .filter(|e| !e.is_empty())
        .collect();
    entries.is_empty()
        || entries.iter().any(|e| {
            if exact {
                name == *e
            } else {
                name.starts_with(e)
            }
        })
}

/// NCCL's `findInterfaces(spec)`: every IPv4/IPv6 address (IPv6 loopback skipped) of an interface
/// whose name the spec admits, one per interface, in list order. `family` 4 or 6 keeps only that
/// family (`NCCL_SOCKET_FAMILY=AF_INET`/`AF_INET6`).
fn nccl_find(ifaces: &[Interface], spec: &str, family: Option<u8>) -> Vec<(String, IpAddr)> {
    let (not, rest) = match spec.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, spec),
    };
    let (exact, list) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let mut found: Vec<(String, IpAddr)> = Vec::new();
    for (addr, name) in addresses_in_order(ifaces) {
        let keep_family = match family {
            Some(4) => addr.is_ipv4(),
            Some(6) => addr.is_ipv6(),
            _ => true,
        };
        if !keep_family || matches!(addr, IpAddr::V6(v6) if v6.is_loopback()) {
            continue;
        }
        if nccl_list_matches(name, list, exact) == not {
            continue;
        }
        if !found.iter().any(|(n, _)| n == name) {
            found.push((name.to_owned(), addr));
        }
    }
    found
}

/// The addresses as `getifaddrs` lists them: every IPv4 address first (interface order), then every
/// IPv6 one, as Linux's `getifaddrs` returns them.
fn addresses_in_order(ifaces: &[Interface]) -> Vec<(IpAddr, &str)> {
    let mut v4: Vec<(IpAddr, &str)> = Vec::new();
    let mut v6: Vec<(IpAddr, &str)> = Vec::new();
    for iface in ifaces {
        for (a, _) in &iface.addrs {
            if a.is_ipv4() {
                v4.push((*a, &iface.name));
            } else {
                v6.push((*a, &iface.name));
            }
        }
    }
    v4.extend(v6);
    v4
}

/// The interfaces NCCL's socket code (`ncclFindInterfaces`) would take, given the values of
/// `NCCL_SOCKET_IFNAME` and `NCCL_SOCKET_FAMILY` (`AF_INET`, `AF_INET6`).
///
/// As NCCL: a setting of one character or none is ignored; a set one is used alone ("find or
/// fail"); otherwise `ib` prefixes first, then anything but `docker` and `lo`, then `docker`, then
/// `lo`. NCCL does not look at whether an interface is up.
pub fn nccl_choice(
    ifaces: &[Interface],
    socket_ifname: Option<&str>,
    socket_family: Option<&str>,
) -> NcclChoice {
    let family = match socket_family {
        Some("AF_INET") => Some(4),
        Some("AF_INET6") => Some(6),
        _ => None,
    };
    if let Some(spec) = socket_ifname.filter(|s| s.len() > 1) {
        return NcclChoice {
            rule: format!("NCCL_SOCKET_IFNAME={spec}"),
            chosen: nccl_find(ifaces, spec, family),
        };
    }
    for spec in ["ib", "^docker,lo", "docker", "lo"] {
        let chosen = nccl_find(ifaces, spec, family);
        if !chosen.is_empty() {
            return NcclChoice {
                rule: format!("default (step `{spec}`)"),
                chosen,
            };
        }
    }
    NcclChoice {
        rule: "default".to_owned(),
        chosen: Vec::new(),
    }
}

/// Whether `iface` matches one entry of an Open MPI `if_include`/`if_exclude` list: a name
/// (exactly) or an IPv4 `a.b.c.d/n` network containing one of its addresses.
fn ompi_entry_matches(iface: &Interface, entry: &str) -> bool {
    let Some((net, bits)) = entry.split_once('/') else {
        return iface.name == entry;
    };
    let (Ok(net), Ok(bits)) = (net.parse::<std::net::Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    if bits > 32 {
        return false;
    }
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    iface.addrs.iter().any(|(a, _)| match a {
        IpAddr::V4(v4) => u32::from(*v4) & mask == u32::from(net) & mask,
        IpAddr::V6(_) => false,
    })
}

fn ompi_list(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect()
}

/// The interfaces Open MPI's TCP byte transfer layer would use (it stripes over all of them), given
/// `btl_tcp_if_include` and `btl_tcp_if_exclude`: only interfaces that are up and have an IPv4
/// address; the include list when set, else all but the exclude list (default
/// [`OMPI_BTL_DEFAULT_EXCLUDE`]).
///
/// # Errors
/// Both lists set, which Open MPI refuses.
pub fn ompi_tcp_btl(
    ifaces: &[Interface],
    include: Option<&str>,
    exclude: Option<&str>,
) -> Result<Vec<String>, String> {
    if include.is_some() && exclude.is_some() {
        return Err(
            "btl_tcp_if_include and btl_tcp_if_exclude are both set; Open MPI refuses that".into(),
        );
    }
    let candidates = ifaces
        .iter()
        .filter(|i| i.up && i.addrs.iter().any(|(a, _)| a.is_ipv4()));
    Ok(match include {
        Some(list) => {
            let list = ompi_list(list);
            candidates
                .filter(|i| list.iter().any(|e| ompi_entry_matches(i, e)))
                .map(|i| i.name.clone())
                .collect()
        }
        None => {
            let list = ompi_list(exclude.unwrap_or(OMPI_BTL_DEFAULT_EXCLUDE));
            candidates
                .filter(|i| !list.iter().any(|e| ompi_entry_matches(i, e)))
                .map(|i| i.name.clone())
                .collect()
        }
    })
}

/// The interfaces Open MPI's out-of-band channel (`oob_tcp`, which `mpirun` and its daemons talk
/// over) would offer, given `oob_tcp_if_include` and `oob_tcp_if_exclude`: up, with an IPv4
/// address; the include list when set, else all but the exclude list; loopback left out unless it
/// is all there is or the include list names it.
///
/// # Errors
/// Both lists set, which Open MPI refuses.
pub fn ompi_tcp_oob(
    ifaces: &[Interface],
    include: Option<&str>,
    exclude: Option<&str>,
) -> Result<Vec<String>, String> {
    if include.is_some() && exclude.is_some() {
        return Err(
            "oob_tcp_if_include and oob_tcp_if_exclude are both set; Open MPI refuses that".into(),
        );
    }
    let up: Vec<&Interface> = ifaces
        .iter()
        .filter(|i| i.up && i.addrs.iter().any(|(a, _)| a.is_ipv4()))
        .collect();
    if let Some(list) = include {
        let list = ompi_list(list);
        return Ok(up
            .iter()
            .filter(|i| list.iter().any(|e| ompi_entry_matches(i, e)))
            .map(|i| i.name.clone())
            .collect());
    }
    let list = ompi_list(exclude.unwrap_or(""));
    let kept: Vec<&&Interface> = up
        .iter()
        .filter(|i| !list.iter().any(|e| ompi_entry_matches(i, e)))
        .collect();
    let outside: Vec<String> = kept
        .iter()
        .filter(|i| !i.loopback)
        .map(|i| i.name.clone())
        .collect();
    Ok(if outside.is_empty() {
        kept.iter().map(|i| i.name.clone()).collect()
    } else {
        outside
    })
}

/// The interface to pin every transport to: the first routable `ib*` interface, else the first
/// routable one that is not a decoy (see [`DECOYS`]). `None` when there is none.
pub fn preferred(ifaces: &[Interface]) -> Option<&Interface> {
    let routable = || ifaces.iter().filter(|i| i.routable() && !i.is_decoy());
    routable()
        .find(|i| i.name.starts_with("ib"))
        .or_else(|| routable().next())
}

/// Warnings about this host's interfaces: each decoy that is up, and more than one routable
/// interface (the transports may each pick a different one, or one that leads nowhere).
pub fn warnings(ifaces: &[Interface]) -> Vec<String> {
    let mut out = Vec::new();
    for i in ifaces.iter().filter(|i| i.up && i.is_decoy()) {
        let what = if i.name.starts_with("docker") {
            "a container bridge"
        } else if i.name.starts_with("veth") {
            "one end of a container's virtual pair"
        } else {
            "libvirt's bridge"
        };
        out.push(format!(
            "{} ({}) is up: {what}, which reaches no other node; NCCL skips `docker*` by default \
             but not `veth*`/`virbr*`, and Open MPI's TCP transports take it unless pinned",
            i.name,
            if i.addrs.is_empty() {
                "no address".to_owned()
            } else {
                i.addr_list()
            }
        ));
    }
    let routable: Vec<&str> = ifaces
        .iter()
        .filter(|i| i.routable())
        .map(|i| i.name.as_str())
        .collect();
    if routable.len() > 1 {
        out.push(format!(
            "{} routable interfaces ({}): NCCL takes one by its rules and Open MPI stripes over \
             all it is allowed; pin them to the one that reaches the other nodes",
            routable.len(),
            routable.join(", ")
        ));
    }
    out
}

/// The settings that pin NCCL's sockets and Open MPI's TCP transports to the interface `name`:
/// `(variable, value)` pairs (NCCL's with `=`, an exact name match, so `eth1` does not also take
/// `eth10`).
pub fn pin(name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("NCCL_SOCKET_IFNAME", format!("={name}")),
        ("OMPI_MCA_btl_tcp_if_include", name.to_owned()),
        ("OMPI_MCA_oob_tcp_if_include", name.to_owned()),
    ]
}

/// The interfaces of this host with their IPv4 and IPv6 addresses, in `getifaddrs(3)` order
/// (interfaces without an address are listed too, with none).
///
/// # Errors
/// `getifaddrs` failing.
pub fn interfaces() -> std::io::Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; on success getifaddrs stores a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out: Vec<Interface> = Vec::new();
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        let idx = match out.iter().position(|i| i.name == name) {
            Some(idx) => idx,
            None => {
                out.push(Interface {
                    name,
                    up: flags & libc::IFF_UP as u32 != 0,
                    loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        // SAFETY: ifa_addr and ifa_netmask are null or point at socket addresses of the family in
        // their sa_family, owned by the list.
        if let Some(addr) = unsafe { sockaddr_ip(ifa.ifa_addr) } {
            // SAFETY: as above.
            let prefix = unsafe { sockaddr_ip(ifa.ifa_netmask) }.map_or(0, |m| match m {
                IpAddr::V4(v4) => u32::from(v4).count_ones() as u8,
                IpAddr::V6(v6) => u128::from(v6).count_ones() as u8,
            });
            out[idx].addrs.push((addr, prefix));
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once; nothing borrowed from it is kept.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IP address in a socket address, for `AF_INET` and `AF_INET6`.
///
/// # Safety
/// `sa` is null or points at a socket address whose size matches its `sa_family`.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null and valid per the contract.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(IpAddr::from(
                u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::from(sin6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, up: bool, addrs: &[&str]) -> Interface {
        Interface {
            name: name.to_owned(),
            up,
            loopback: name == "lo",
            addrs: addrs
                .iter()
                .map(|a| {
                    let (ip, p) = a.split_once('/').unwrap();
                    (ip.parse().unwrap(), p.parse().unwrap())
                })
                .collect(),
        }
    }

    /// A node as the two-node test makes it: lo, a decoy docker0, eth0.
    fn node() -> Vec<Interface> {
        vec![
            iface("lo", true, &["127.0.0.1/8", "::1/128"]),
            iface("docker0", true, &["172.17.0.1/16", "fe80::1/64"]),
            iface("eth0", true, &["10.77.0.1/24", "fe80::2/64"]),
        ]
    }

    fn names(c: &NcclChoice) -> Vec<&str> {
        c.chosen.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn nccl_default_skips_docker_and_lo_and_prefers_ib() {
        let c = nccl_choice(&node(), None, None);
        assert_eq!(names(&c), ["eth0"]);
        assert_eq!(c.rule, "default (step `^docker,lo`)");
        assert_eq!(
            c.bootstrap().unwrap().1,
            "10.77.0.1".parse::<IpAddr>().unwrap()
        );
        let mut with_ib = node();
        with_ib.push(iface("ib0", true, &["192.168.1.5/24"]));
        assert_eq!(names(&nccl_choice(&with_ib, None, None)), ["ib0"]);
        // Only docker and lo: docker before lo.
        let bare = &node()[..2];
        assert_eq!(names(&nccl_choice(bare, None, None)), ["docker0"]);
        assert_eq!(names(&nccl_choice(&node()[..1], None, None)), ["lo"]);
        // A one-character setting is ignored, as NCCL does.
        assert_eq!(nccl_choice(&node(), Some("e"), None).rule, c.rule);
    }

    #[test]
    fn nccl_socket_ifname_excludes_and_exact_matches() {
        // horovod#700: excluding docker0 alone lets lo in, and lo comes first.
        let c = nccl_choice(&node(), Some("^docker0"), None);
        assert_eq!(names(&c), ["lo", "eth0"]);
        assert_eq!(c.bootstrap().unwrap().0, "lo");
        assert_eq!(
            names(&nccl_choice(&node(), Some("^docker,lo"), None)),
            ["eth0"]
        );
        assert_eq!(names(&nccl_choice(&node(), Some("eth"), None)), ["eth0"]);
        assert_eq!(names(&nccl_choice(&node(), Some("=eth0"), None)), ["eth0"]);
        assert!(nccl_choice(&node(), Some("=eth"), None).chosen.is_empty());
        assert_eq!(
            names(&nccl_choice(&node(), Some("^=lo"), None)),
            ["docker0", "eth0"]
        );
        assert_eq!(
            names(&nccl_choice(&node(), Some("eth0:5000,ib"), None)),
            ["eth0"]
        );
        // Set but matching nothing: find or fail, no fallback.
        let none = nccl_choice(&node(), Some("ens"), None);
        assert!(none.chosen.is_empty());
        assert_eq!(none.rule, "NCCL_SOCKET_IFNAME=ens");
        // IPv6 only: eth0's link-local address, lo's ::1 skipped.
        let v6 = nccl_choice(&node(), Some("^docker"), Some("AF_INET6"));
        assert_eq!(v6.chosen, [("eth0".to_owned(), "fe80::2".parse().unwrap())]);
    }

    #[test]
    fn open_mpi_btl_takes_every_up_interface_but_loopback() {
        let n = node();
        assert_eq!(ompi_tcp_btl(&n, None, None).unwrap(), ["docker0", "eth0"]);
        assert_eq!(ompi_tcp_btl(&n, Some("eth0"), None).unwrap(), ["eth0"]);
        assert_eq!(
            ompi_tcp_btl(&n, Some("10.77.0.0/24"), None).unwrap(),
            ["eth0"]
        );
        assert_eq!(
            ompi_tcp_btl(&n, None, Some("docker0")).unwrap(),
            ["lo", "eth0"]
        );
        assert!(ompi_tcp_btl(&n, Some("eth0"), Some("lo")).is_err());
        let mut down = n.clone();
        down[2].up = false;
        assert_eq!(ompi_tcp_btl(&down, None, None).unwrap(), ["docker0"]);
    }

    #[test]
    fn open_mpi_oob_keeps_loopback_only_when_alone() {
        let n = node();
        assert_eq!(ompi_tcp_oob(&n, None, None).unwrap(), ["docker0", "eth0"]);
        assert_eq!(ompi_tcp_oob(&n, Some("eth0"), None).unwrap(), ["eth0"]);
        assert_eq!(ompi_tcp_oob(&n, Some("lo"), None).unwrap(), ["lo"]);
        assert_eq!(ompi_tcp_oob(&n[..1], None, None).unwrap(), ["lo"]);
        assert_eq!(
            ompi_tcp_oob(&n, None, Some("docker0,eth0")).unwrap(),
            ["lo"]
        );
        assert!(ompi_tcp_oob(&n, Some("a"), Some("b")).is_err());
    }

    #[test]
    fn decoys_and_several_routable_interfaces_are_warned_about() {
        let w = warnings(&node());
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("docker0 (172.17.0.1/16 fe80::1/64) is up: a container bridge"));
        assert!(w[1].starts_with("2 routable interfaces (docker0, eth0)"));
        let mut more = node();
        more.push(iface("veth12ab", true, &[]));
        more.push(iface("virbr0", true, &["192.168.122.1/24"]));
        more.push(iface("virbr1", false, &["192.168.123.1/24"]));
        let w = warnings(&more);
        assert!(w
            .iter()
            .any(|l| l.starts_with("veth12ab (no address) is up: one end")));
        assert!(w
            .iter()
            .any(|l| l.starts_with("virbr0 (192.168.122.1/24) is up: libvirt")));
        assert!(!w.iter().any(|l| l.starts_with("virbr1")));
        assert!(w
            .iter()
            .any(|l| l.starts_with("3 routable interfaces (docker0, eth0, virbr0)")));
        assert!(warnings(&[
            iface("lo", true, &["127.0.0.1/8"]),
            iface("eth0", true, &["10.0.0.1/8"])
        ])
        .is_empty());
    }

    #[test]
    fn the_preferred_interface_and_its_settings() {
        assert_eq!(preferred(&node()).unwrap().name, "eth0");
        let mut with_ib = node();
        with_ib.push(iface("ib0", true, &["192.168.1.5/24"]));
        assert_eq!(preferred(&with_ib).unwrap().name, "ib0");
        assert!(preferred(&node()[..2]).is_none());
        // A link-local-only interface is not routable.
        assert!(!iface("eth1", true, &["169.254.3.4/16", "fe80::9/64"]).routable());
        assert_eq!(
            pin("eth0"),
            [
                ("NCCL_SOCKET_IFNAME", "=eth0".to_owned()),
                ("OMPI_MCA_btl_tcp_if_include", "eth0".to_owned()),
                ("OMPI_MCA_oob_tcp_if_include", "eth0".to_owned()),
            ]
        );
    }

    #[test]
    fn this_host_has_a_loopback_interface() {
        let here = interfaces().unwrap();
        let lo = here
            .iter()
            .find(|i| i.loopback)
            .expect("a loopback interface");
        assert!(
            lo.addrs.iter().any(|(a, p)| a.is_loopback() && *p > 0),
            "{lo:?}"
        );
    }
}
