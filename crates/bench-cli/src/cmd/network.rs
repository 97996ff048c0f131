//! The doctor's network section: per node, the interfaces that are up, which ones NCCL's sockets and
//! Open MPI's TCP transports would take (the rules of `collectives_core::netif`, given this
//! process's environment), warnings for decoys and for more than one routable interface, the
//! settings that pin all three, and across nodes where they disagree. Also the launcher check: a
//! process that is rank 0 of 1 while its launcher started more.

use std::fmt::Write as _;

use collectives_core::netif::{self, Interface};
use serde::{Deserialize, Serialize};

/// What one rank sees of its node's network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetView {
    /// The node (`MPI_Get_processor_name`).
    pub host: String,
    /// The interfaces that are up, with their addresses (`name`, `a/n b/m`).
    pub up: Vec<(String, String)>,
    /// NCCL's choice in words: the interfaces with the address of each, then the rule.
    pub nccl: String,
    /// The interfaces NCCL would take, the bootstrap's first.
    pub nccl_ifaces: Vec<String>,
    /// Open MPI's TCP byte transfer layer: its interfaces, or why it would refuse.
    pub btl: Result<Vec<String>, String>,
    /// Open MPI's out-of-band channel: its interfaces, or why it would refuse.
    pub oob: Result<Vec<String>, String>,
    /// The settings in force that chose (`NCCL_SOCKET_IFNAME=...`, `OMPI_MCA_btl_tcp_if_include=...`).
    pub settings: Vec<String>,
    /// Warnings about this node's interfaces.
    pub warnings: Vec<String>,
    /// The interface to pin to here, and its IPv4 network (`10.0.0.0/24`) when it has one.
    pub preferred: Option<(String, Option<String>)>,
}

/// The variables the rules read.
pub const VARIABLES: [&str; 6] = [
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "OMPI_MCA_btl_tcp_if_include",
    "OMPI_MCA_btl_tcp_if_exclude",
    "OMPI_MCA_oob_tcp_if_include",
    "OMPI_MCA_oob_tcp_if_exclude",
];

/// The IPv4 network of `addr/prefix` as `a.b.c.d/n`.
fn network_of(addr: std::net::IpAddr, prefix: u8) -> Option<String> {
    let std::net::IpAddr::V4(v4) = addr else {
        return None;
    };
    let bits = u32::from(prefix.min(32));
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    Some(format!(
        "{}/{bits}",
        std::net::Ipv4Addr::from(u32::from(v4) & mask)
    ))
}

/// The view of a node with interfaces `ifaces`, on host `host`, with the variables `env` returns.
pub fn view(host: &str, ifaces: &[Interface], env: &dyn Fn(&str) -> Option<String>) -> NetView {
    let nccl = netif::nccl_choice(
        ifaces,
        env("NCCL_SOCKET_IFNAME").as_deref(),
        env("NCCL_SOCKET_FAMILY").as_deref(),
    );
    let nccl_words = if nccl.chosen.is_empty() {
        format!(
            "nothing: no interface matches ({}); NCCL fails with \"no socket interface found\"",
            nccl.rule
        )
    } else {
        let list: Vec<String> = nccl
            .chosen
            .iter()
            .map(|(n, a)| format!("{n} ({a})"))
            .collect();
        format!(
            "{} [{}; the bootstrap uses the first]",
            list.join(", "),
            nccl.rule
        )
    };
    NetView {
        host: host.to_owned(),
        up: ifaces
            .iter()
            .filter(|i| i.up)
            .map(|i| (i.name.clone(), i.addr_list()))
            .collect(),
        nccl: nccl_words,
        nccl_ifaces: nccl.chosen.iter().map(|(n, _)| n.clone()).collect(),
        btl: netif::ompi_tcp_btl(
            ifaces,
            env("OMPI_MCA_btl_tcp_if_include").as_deref(),
            env("OMPI_MCA_btl_tcp_if_exclude").as_deref(),
        ),
        oob: netif::ompi_tcp_oob(
            ifaces,
            env("OMPI_MCA_oob_tcp_if_include").as_deref(),
            env("OMPI_MCA_oob_tcp_if_exclude").as_deref(),
        ),
        settings: VARIABLES
            .iter()
            .filter_map(|k| env(k).map(|v| format!("{k}={v}")))
            .collect(),
        warnings: netif::warnings(ifaces),
        preferred: netif::preferred(ifaces).map(|i| {
            (
                i.name.clone(),
                i.main_addr().and_then(|(a, p)| network_of(a, p)),
            )
        }),
    }
}

/// This process's view: its interfaces (`getifaddrs`) and environment.
pub fn local_view(host: &str) -> NetView {
    match netif::interfaces() {
        Ok(ifaces) => view(host, &ifaces, &|k| std::env::var(k).ok()),
        Err(e) => {
            let mut v = view(host, &[], &|k| std::env::var(k).ok());
            v.warnings.push(format!("getifaddrs failed: {e}"));
            v
        }
    }
}

fn list(r: &Result<Vec<String>, String>) -> String {
    match r {
        Ok(v) if v.is_empty() => {
            "nothing (no interface up with an IPv4 address matches)".to_owned()
        }
        Ok(v) => v.join(", "),
        Err(e) => format!("refused: {e}"),
    }
}

/// Where the nodes disagree: on what NCCL or Open MPI would take, or on the interface to pin to.
/// `views` holds one view per node.
pub fn disagreements(views: &[(Vec<usize>, NetView)]) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: &str, key: &dyn Fn(&NetView) -> String| {
        let first = key(&views[0].1);
        if views.iter().any(|(_, v)| key(v) != first) {
            let each: Vec<String> = views
                .iter()
                .map(|(_, v)| format!("{}: {}", v.host, key(v)))
                .collect();
            out.push(format!("{what} differs: {}", each.join("; ")));
        }
    };
    if views.len() > 1 {
        differ("NCCL's interface", &|v| v.nccl_ifaces.join(","));
        differ("Open MPI's TCP btl", &|v| list(&v.btl));
        differ("Open MPI's oob", &|v| list(&v.oob));
        differ("the interface to pin", &|v| {
            v.preferred.as_ref().map_or("none".into(), |p| p.0.clone())
        });
    }
    out
}

/// The settings that pin every node: by name when every node's interface has the same name; else
/// NCCL's list of the names and Open MPI's network when the nodes share one. `None` when some
/// node has no interface to pin to.
pub fn pins(views: &[(Vec<usize>, NetView)]) -> Option<Vec<(&'static str, String)>> {
    let preferred: Vec<&(String, Option<String>)> = views
        .iter()
        .map(|(_, v)| v.preferred.as_ref())
        .collect::<Option<_>>()?;
    let first = preferred.first()?;
    if preferred.iter().all(|p| p.0 == first.0) {
        return Some(netif::pin(&first.0).into_iter().collect());
    }
    let mut names: Vec<&str> = preferred.iter().map(|p| p.0.as_str()).collect();
    names.dedup();
    let mut v: Vec<(&'static str, String)> =
        vec![("NCCL_SOCKET_IFNAME", format!("={}", names.join(",")))];
    let net = first
        .1
        .as_ref()
        .filter(|n| preferred.iter().all(|p| p.1.as_ref() == Some(n)));
    if let Some(net) = net {
        v.push(("OMPI_MCA_btl_tcp_if_include", net.clone()));
        v.push(("OMPI_MCA_oob_tcp_if_include", net.clone()));
    }
    Some(v)
}

/// The network section of the doctor's report from every rank's view (rank order).
pub fn render(views: &[NetView]) -> String {
    let mut nodes: Vec<(Vec<usize>, NetView)> = Vec::new();
    for (rank, v) in views.iter().enumerate() {
        match nodes.iter_mut().find(|(_, n)| n.host == v.host) {
            Some((ranks, _)) => ranks.push(rank),
            None => nodes.push((vec![rank], v.clone())),
        }
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "network (per node; NCCL as ncclFindInterfaces chooses, Open MPI as its TCP btl and oob choose):"
    );
    for (ranks, v) in &nodes {
        let ranks: Vec<String> = ranks.iter().map(usize::to_string).collect();
        let _ = writeln!(s, "  node {} (ranks {}):", v.host, ranks.join(","));
        for (name, addrs) in &v.up {
            let _ = writeln!(s, "    up {name:<12} {addrs}");
        }
        let _ = writeln!(s, "    NCCL takes       : {}", v.nccl);
        let _ = writeln!(s, "    Open MPI btl tcp : {}", list(&v.btl));
        let _ = writeln!(s, "    Open MPI oob tcp : {}", list(&v.oob));
        if !v.settings.is_empty() {
            let _ = writeln!(s, "    set              : {}", v.settings.join(" "));
        }
        for w in &v.warnings {
            let _ = writeln!(s, "    WARNING: {w}");
        }
    }
    let disagree = disagreements(&nodes);
    if nodes.len() > 1 && disagree.is_empty() {
        let _ = writeln!(s, "  the {} nodes agree", nodes.len());
    }
    for d in &disagree {
        let _ = writeln!(s, "  NODES DISAGREE: {d}");
    }
    match pins(&nodes) {
        Some(settings) => {
            let _ = writeln!(s, "  to pin them (on every node, e.g. in the job script):");
            for (k, v) in settings {
                let _ = writeln!(s, "    export {k}={v}");
            }
        }
        None => {
            let _ = writeln!(
                s,
                "  no routable interface that is not a decoy on some node: nothing to pin to \
                 (one node only needs none)"
            );
        }
    }
    s
}

/// Variables by which launchers tell a process how many were started, with the launcher.
pub const LAUNCHER_SIZES: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
    (
        "PMI_SIZE",
        "a PMI launcher (MPICH's or Intel MPI's mpiexec, srun --mpi=pmi2)",
    ),
    ("PMIX_SIZE", "a PMIx launcher"),
    ("SLURM_STEP_NUM_TASKS", "srun"),
];

/// The launcher mistake, when this process is rank 0 of 1 (`size` is 1) but a launcher's variable
/// says it started more: every process then runs alone, each one "rank 0 of 1" (mpi4py#280).
/// `library` names the MPI the binary is linked with.
pub fn launcher_mismatch(
    size: usize,
    library: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    if size != 1 {
        return None;
    }
    let (var, who, n) = LAUNCHER_SIZES.iter().find_map(|(var, who)| {
        let n: usize = env(var)?.trim().parse().ok()?;
        (n > 1).then_some((*var, *who, n))
    })?;
    Some(format!(
        "this process is rank 0 of 1, but {who} started {n} ({var}={n}): every process is running \
         alone. The launcher does not belong to the MPI this binary is linked with ({library}), or \
         srun lacks PMI support for it. Launch with that MPI's own mpirun (its `mpirun --version` \
         names it), or `srun --mpi=pmix`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, addrs: &[&str]) -> Interface {
        Interface {
            name: name.to_owned(),
            up: true,
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

    fn node(addr: &str, link: &str) -> Vec<Interface> {
        vec![
            iface("lo", &["127.0.0.1/8"]),
            iface("docker0", &["172.17.0.1/16"]),
            iface(link, &[addr]),
        ]
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_node_with_a_decoy_is_described_and_pinned() {
        let v = view("xt-node1", &node("10.77.0.1/24", "eth0"), &no_env);
        assert_eq!(v.nccl_ifaces, ["eth0"]);
        assert_eq!(v.btl, Ok(vec!["docker0".to_owned(), "eth0".to_owned()]));
        assert_eq!(
            v.preferred,
            Some(("eth0".to_owned(), Some("10.77.0.0/24".to_owned())))
        );
        let two = [
            v.clone(),
            v.clone(),
            view("xt-node2", &node("10.77.0.2/24", "eth0"), &no_env),
        ];
        let text = render(&two);
        assert!(text.contains("  node xt-node1 (ranks 0,1):\n"), "{text}");
        assert!(text.contains("  node xt-node2 (ranks 2):\n"), "{text}");
        assert!(
            text.contains("    up docker0      172.17.0.1/16\n"),
            "{text}"
        );
        assert!(
            text.contains("    NCCL takes       : eth0 (10.77.0.1) [default (step `^docker,lo`)")
        );
        assert!(text.contains("    Open MPI btl tcp : docker0, eth0\n"));
        assert!(text.contains("WARNING: docker0 (172.17.0.1/16) is up"));
        assert!(text.contains("  the 2 nodes agree\n"));
        assert!(text.contains("    export NCCL_SOCKET_IFNAME==eth0\n"));
        assert!(text.contains("    export OMPI_MCA_btl_tcp_if_include=eth0\n"));
        assert!(text.contains("    export OMPI_MCA_oob_tcp_if_include=eth0\n"));
    }

    #[test]
    fn settings_in_force_are_followed_and_shown() {
        let env = |k: &str| match k {
            "NCCL_SOCKET_IFNAME" => Some("^docker0".to_owned()),
            "OMPI_MCA_btl_tcp_if_include" => Some("eth0".to_owned()),
            _ => None,
        };
        let v = view("a", &node("10.0.0.1/24", "eth0"), &env);
        // ^docker0 alone lets lo in first (horovod#700).
        assert_eq!(v.nccl_ifaces, ["lo", "eth0"]);
        assert_eq!(v.btl, Ok(vec!["eth0".to_owned()]));
        assert_eq!(
            v.settings,
            [
                "NCCL_SOCKET_IFNAME=^docker0",
                "OMPI_MCA_btl_tcp_if_include=eth0"
            ]
        );
        assert!(render(&[v]).contains("    set              : NCCL_SOCKET_IFNAME=^docker0"));
    }

    #[test]
    fn nodes_that_disagree_are_named_and_pinned_by_network() {
        let a = view("n1", &node("10.1.0.1/16", "eth0"), &no_env);
        let b = view("n2", &node("10.1.0.2/16", "ens3"), &no_env);
        let text = render(&[a, b]);
        assert!(
            text.contains("NODES DISAGREE: NCCL's interface differs: n1: eth0; n2: ens3"),
            "{text}"
        );
        assert!(text.contains("NODES DISAGREE: the interface to pin differs: n1: eth0; n2: ens3"));
        assert!(text.contains("    export NCCL_SOCKET_IFNAME==eth0,ens3\n"));
        assert!(text.contains("    export OMPI_MCA_btl_tcp_if_include=10.1.0.0/16\n"));
        // Only a decoy: nothing to pin to.
        let c = view("n3", &node("172.18.0.1/16", "docker1")[..2], &no_env);
        assert!(render(&[c]).contains("nothing to pin to"));
    }

    #[test]
    fn rank_zero_of_one_under_another_launcher_is_named() {
        let hydra = |k: &str| (k == "PMI_SIZE").then(|| "4".to_owned());
        let why = launcher_mismatch(1, "Open MPI v4.1.4", &hydra).unwrap();
        assert!(
            why.starts_with("this process is rank 0 of 1, but a PMI launcher"),
            "{why}"
        );
        assert!(why.contains("(PMI_SIZE=4)") && why.contains("(Open MPI v4.1.4)"));
        assert_eq!(launcher_mismatch(4, "x", &hydra), None);
        assert_eq!(launcher_mismatch(1, "x", &no_env), None);
        let one = |k: &str| (k == "OMPI_COMM_WORLD_SIZE").then(|| "1".to_owned());
        assert_eq!(launcher_mismatch(1, "x", &one), None);
    }

    #[test]
    fn views_travel_as_json() {
        let v = view("h", &node("10.0.0.1/24", "eth0"), &no_env);
        let back: NetView = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back, v);
    }
}
