//! Two nodes on one machine: two network namespaces joined by a veth pair, each with its own
//! address and host name and a decoy `docker0` bridge that is up but leads nowhere, and Open MPI
//! launched across them with 2 ranks per node, TCP between the nodes.
//!
//! The layout (`ip` commands in [`TwoNodes::setup_commands`]):
//!
//! | node | namespace | host name (UTS namespace) | `eth0` (one end of the veth pair) | decoy |
//! |---|---|---|---|---|
//! | 1 | `xtask-PID-node1` | `xt-node1` | `10.77.0.1/24` | `docker0`, `172.17.0.1/16`, up, no ports |
//! | 2 | `xtask-PID-node2` | `xt-node2` | `10.77.0.2/24` | `docker0`, `172.17.0.1/16`, up, no ports |
//!
//! `mpirun` runs in node 1 and reaches node 2 through its rsh agent, a script that runs
//! `ip netns exec NODE unshare --uts sh -c "hostname NAME && COMMAND"` instead of ssh. Each node
//! gets a host name of its own because Open MPI's shared-memory transport names its segments after
//! the host: two "nodes" called the same would share them and crash. The launch pins Open MPI to
//! `eth0` (`btl_tcp_if_include`, `oob_tcp_if_include`), the settings `collbench doctor` prints for
//! this layout; shared memory (`vader`) inside a node, TCP between them.
//!
//! What runs, 4 ranks over the two nodes ([`plan`]): every `tests/mpi_*` binary (all collectives of
//! host MPI, checked mode, the dead peer: the last rank, on node 2, leaves and the ranks of node 1
//! answer `Timeout`), every example that needs no GPU (`05_checked_mismatch` in checked mode),
//! `collbench doctor` (which must name the decoy and the settings), and where OMB's source is found
//! `osu_allreduce` beside `collbench allreduce --osu` with the same flags.
//!
//! Where the machine cannot make namespaces (not root, no `ip`, no `unshare`, or `ip netns add`
//! refused), the stage prints one line saying why and is counted as skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::artifacts::{self, Artifact};
use crate::exec;
use crate::mpirun::{self, Binary, Kind, Launch};
use crate::results::parse_mpi_tests;
use crate::summary::{Step, Tally};
use crate::{binaries, cargo, host, jobs};

/// Ranks of every launch: 2 per node.
pub const RANKS: u32 = 4;

/// The subnet of the veth pair; node `i` (1 or 2) is `10.77.0.i`.
pub const SUBNET: &str = "10.77.0.0/24";

/// The decoy bridge of every node, and its address (the same on both, as Docker's default is).
pub const DECOY: (&str, &str) = ("docker0", "172.17.0.1/16");

/// The interface between the nodes, inside each namespace.
pub const LINK: &str = "eth0";

/// One "node": a network namespace with its host name and address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The network namespace (`ip netns`).
    pub ns: String,
    /// The host name its processes see.
    pub host: String,
    /// Its address on [`LINK`] (no prefix length).
    pub addr: String,
}

/// The two nodes and the files the launches need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwoNodes {
    /// Node 1 (where `mpirun` runs) and node 2.
    pub nodes: [Node; 2],
    /// The names of the veth pair's ends before they move into the namespaces.
    pub veth: [String; 2],
    /// Where the rsh agent, the hostfile and the logs go.
    pub dir: PathBuf,
}

impl TwoNodes {
    /// The layout for the run tagged `tag` (this process's id), with its files in `dir`.
    pub fn new(tag: u32, dir: &Path) -> Self {
        let node = |i: u32| Node {
            ns: format!("xtask-{tag}-node{i}"),
            host: format!("xt-node{i}"),
            addr: format!("10.77.0.{i}"),
        };
        TwoNodes {
            nodes: [node(1), node(2)],
            // Interface names have at most 15 characters.
            veth: [format!("xt{tag}a"), format!("xt{tag}b")],
            dir: dir.to_path_buf(),
        }
    }

    /// The `ip` commands (arguments after `ip`) that make the two nodes.
    pub fn setup_commands(&self) -> Vec<Vec<String>> {
        let mut v: Vec<Vec<String>> = Vec::new();
        let mut cmd = |words: &[&str]| v.push(words.iter().map(|w| (*w).to_owned()).collect());
        for n in &self.nodes {
            cmd(&["netns", "add", &n.ns]);
        }
        cmd(&[
            "link",
            "add",
            &self.veth[0],
            "type",
            "veth",
            "peer",
            "name",
            &self.veth[1],
        ]);
        for (n, end) in self.nodes.iter().zip(&self.veth) {
            let ns = n.ns.as_str();
            let addr = format!("{}/24", n.addr);
            cmd(&["link", "set", end, "netns", ns]);
            cmd(&["-n", ns, "link", "set", end, "name", LINK]);
            cmd(&["-n", ns, "link", "set", "lo", "up"]);
            cmd(&["-n", ns, "addr", "add", &addr, "dev", LINK]);
            cmd(&["-n", ns, "link", "set", LINK, "up"]);
            cmd(&["-n", ns, "link", "add", DECOY.0, "type", "bridge"]);
            cmd(&["-n", ns, "addr", "add", DECOY.1, "dev", DECOY.0]);
            cmd(&["-n", ns, "link", "set", DECOY.0, "up"]);
        }
        v
    }

    /// The `ip` commands that remove the nodes (the veth pair goes with its namespaces).
    pub fn teardown_commands(&self) -> Vec<Vec<String>> {
        self.nodes
            .iter()
            .map(|n| vec!["netns".to_owned(), "del".to_owned(), n.ns.clone()])
            .collect()
    }

    /// The rsh agent Open MPI runs as `AGENT [OPTIONS] HOST COMMAND...` to start its daemon on
    /// node 2: the command runs through `sh -c` (it is quoted for a remote shell) in the node's
    /// namespaces.
    pub fn agent_script(&self) -> String {
        let mut s = String::from(
            "#!/bin/sh\n\
             # Open MPI's rsh agent for the two namespace nodes of `cargo xtask test`:\n\
             # AGENT [OPTIONS] HOST COMMAND... runs COMMAND on HOST's namespace with its host name.\n\
             while [ \"${1#-}\" != \"$1\" ]; do shift; done\n\
             node=$1; shift\n\
             case $node in\n",
        );
        for n in &self.nodes {
            s.push_str(&format!(
                "  {}|{}) ns={}; name={} ;;\n",
                n.addr, n.host, n.ns, n.host
            ));
        }
        s.push_str(
            "  *) echo \"xtask rsh agent: unknown node $node\" >&2; exit 1 ;;\n\
             esac\n\
             exec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $name && $*\"\n",
        );
        s
    }

    /// The hostfile: each node by address, 2 slots.
    pub fn hostfile(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("{} slots=2\n", n.addr))
            .collect()
    }

    /// The agent's path.
    pub fn agent_path(&self) -> PathBuf {
        self.dir.join("rsh-agent.sh")
    }

    /// The hostfile's path.
    pub fn hostfile_path(&self) -> PathBuf {
        self.dir.join("hostfile")
    }

    /// `mpirun -n RANKS` of `exe args` across the two nodes, started in node 1: `ip netns exec
    /// NODE1 unshare --uts sh -c 'hostname "$0" && exec "$@"' HOST1 mpirun ...` with the hostfile,
    /// the rsh agent and Open MPI pinned to [`LINK`].
    pub fn launch(&self, exe: &Path, args: &[String], as_root: bool) -> Launch {
        let mut launch = Launch::new(exe, args, RANKS, as_root, true).with_program(Path::new("ip"));
        let agent = self.agent_path().display().to_string();
        let hostfile = self.hostfile_path().display().to_string();
        let mca = [
            ("plm_rsh_agent", agent.as_str()),
            ("plm_rsh_no_tree_spawn", "1"),
            ("btl", "self,vader,tcp"),
            ("btl_tcp_if_include", LINK),
            ("oob_tcp_if_include", LINK),
            // 2 slots per node claim 4 cores the machine may not have: ranks that spin while they
            // wait take turns with each other (and with everything else) only when they yield.
            ("mpi_yield_when_idle", "1"),
        ];
        let mut options: Vec<String> = [
            "netns",
            "exec",
            &self.nodes[0].ns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            "hostname \"$0\" && exec \"$@\"",
            &self.nodes[0].host,
            "mpirun",
        ]
        .map(str::to_owned)
        .to_vec();
        options.append(&mut launch.options);
        options.extend(["--hostfile".to_owned(), hostfile]);
        for (key, value) in mca {
            options.extend(["--mca".to_owned(), key.to_owned(), value.to_owned()]);
        }
        launch.options = options;
        launch
    }
}

/// Why this machine cannot make the two nodes, from what was found; `None` when it can try.
pub fn cannot_make_nodes(
    as_root: bool,
    ip: Option<&Path>,
    unshare: Option<&Path>,
) -> Option<String> {
    if !as_root {
        return Some("not running as root, so no network namespaces can be made".to_owned());
    }
    if ip.is_none() {
        return Some(
            "no `ip` on PATH (Debian: iproute2; `cargo xtask deps` installs it)".to_owned(),
        );
    }
    if unshare.is_none() {
        return Some("no `unshare` on PATH (Debian: util-linux)".to_owned());
    }
    None
}

/// The nodes while they exist: removed when dropped.
struct Up<'a> {
    nodes: &'a TwoNodes,
}

impl Drop for Up<'_> {
    fn drop(&mut self) {
        for args in self.nodes.teardown_commands() {
            let _ = Command::new("ip").args(&args).output();
        }
    }
}

/// Runs `ip ARGS`; the error names the command and what `ip` said.
fn ip(args: &[String]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Makes the nodes and writes the agent and the hostfile.
fn bring_up(nodes: &TwoNodes) -> Result<Up<'_>, String> {
    std::fs::create_dir_all(&nodes.dir)
        .map_err(|e| format!("cannot create {}: {e}", nodes.dir.display()))?;
    let agent = nodes.agent_path();
    std::fs::write(&agent, nodes.agent_script())
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))
        })
        .map_err(|e| format!("cannot write {}: {e}", agent.display()))?;
    std::fs::write(nodes.hostfile_path(), nodes.hostfile())
        .map_err(|e| format!("cannot write the hostfile: {e}"))?;
    // The first command alone tells whether namespaces can be made at all.
    let commands = nodes.setup_commands();
    ip(&commands[0])?;
    let up = Up { nodes };
    for args in &commands[1..] {
        ip(args)?;
    }
    Ok(up)
}

/// The test binaries and examples to run across the nodes, from what cargo built: every `mpi_*`
/// test and every example that needs no GPU, as `cargo xtask test` selects them.
pub fn plan(built: &[Artifact], manifest: &Path) -> Vec<Binary> {
    binaries::select(built, manifest, false).0
}

/// `collbench` runs across the nodes (each must exit 0): the doctor, and every collective small
/// with its value check.
pub fn collbench_commands() -> Vec<Vec<String>> {
    let mut v = vec![vec!["doctor".to_owned()]];
    for c in crate::bench::COLLECTIVES {
        let args = [
            "coll", c, "-b", "8", "-e", "64K", "-f", "8", "-n", "5", "-w", "1", "-c", "1",
        ];
        v.push(args.map(str::to_owned).to_vec());
    }
    v
}

/// What `collbench doctor` must say about the two nodes: both host names, the decoy, and the
/// settings that pin the transports to [`LINK`]. Returns what is missing.
pub fn doctor_missing(output: &str) -> Vec<String> {
    let mut wanted: Vec<String> = vec![
        "xt-node1".into(),
        "xt-node2".into(),
        format!("{} (172.17.0.1/16", DECOY.0),
    ];
    wanted.extend(
        collectives_pins()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    wanted.retain(|w| !output.contains(w.as_str()));
    wanted
}

/// The settings the doctor prints for [`LINK`] (as `collectives_core::netif::pin` makes them).
fn collectives_pins() -> [(&'static str, String); 3] {
    [
        ("NCCL_SOCKET_IFNAME", format!("={LINK}")),
        ("OMPI_MCA_btl_tcp_if_include", LINK.to_owned()),
        ("OMPI_MCA_oob_tcp_if_include", LINK.to_owned()),
    ]
}

/// The stage's lines in the summary: the launches across the nodes, and OMB beside collbench.
pub const LABELS: [&str; 2] = [
    "two nodes (netns, 4 ranks, TCP between nodes)",
    "two nodes: collbench beside OMB osu_allreduce",
];

/// The stage's steps when it is not run.
pub fn skipped_steps() -> Vec<Step> {
    LABELS
        .iter()
        .map(|l| Step {
            label: (*l).to_owned(),
            tally: None,
        })
        .collect()
}

/// The stage's steps for `cargo xtask test`: the multi-rank binaries and collbench across the two
/// nodes, and OMB beside collbench. Skipped (with one printed line) where nodes cannot be made.
pub fn steps(root: &Path, as_root: bool) -> Vec<Step> {
    let [label, omb_label] = LABELS.map(str::to_owned);
    let skipped = |why: String| {
        println!("two-node stage skipped: {why}");
        skipped_steps()
    };
    if let Some(why) = crate::fresh::inside_why() {
        return skipped(why);
    }
    let ip_path = host::which_in_path("ip")
        .or_else(|| Some(PathBuf::from("/usr/sbin/ip")).filter(|p| host::is_executable(p)));
    if let Some(why) = cannot_make_nodes(
        as_root,
        ip_path.as_deref(),
        host::which_in_path("unshare").as_deref(),
    ) {
        return skipped(why);
    }
    println!("== two nodes: building examples, tests and collbench ==");
    let built = artifacts::build(
        &cargo(),
        root,
        &[
            "-p",
            binaries::ROOT_PACKAGE,
            "-p",
            crate::bench::BENCH_PACKAGE,
            "-j",
            &jobs(),
            "--examples",
            "--tests",
            "--bins",
        ],
    );
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            let mut t = Tally::default();
            t.fail(1, format!("two nodes: build: {e}"));
            return vec![
                Step {
                    label,
                    tally: Some(t),
                },
                Step {
                    label: omb_label,
                    tally: None,
                },
            ];
        }
    };
    let dir = root.join("target").join("xtask-netns");
    let nodes = TwoNodes::new(std::process::id(), &dir);
    let up = match bring_up(&nodes) {
        Ok(up) => up,
        Err(why) => return skipped(format!("cannot make network namespaces here: {why}")),
    };
    println!(
        "two nodes: {} ({}) and {} ({}) on {SUBNET} over a veth pair, each with a decoy {} {}; \
         rsh agent {}",
        nodes.nodes[0].host,
        nodes.nodes[0].addr,
        nodes.nodes[1].host,
        nodes.nodes[1].addr,
        DECOY.0,
        DECOY.1,
        nodes.agent_path().display()
    );
    let limit = mpirun::timeout();
    let mut tally = Tally::default();
    for binary in plan(&built, &root.join("Cargo.toml")) {
        tally.absorb(run_binary(&nodes, &binary, as_root, limit));
    }
    let collbench = built
        .iter()
        .find(|a| a.name == crate::bench::BENCH_BINARY && a.is("bin") && !a.test_profile)
        .map(|a| a.executable.clone());
    let omb = match &collbench {
        Some(exe) => {
            tally.absorb(collbench_runs(&nodes, exe, as_root, limit));
            crate::omb::beside(root, exe, limit, |exe, args| {
                nodes.launch(exe, args, as_root)
            })
        }
        None => {
            tally.fail(1, "two nodes: cargo built no collbench");
            None
        }
    };
    drop(up);
    vec![
        Step {
            label,
            tally: Some(tally),
        },
        Step {
            label: omb_label,
            tally: omb,
        },
    ]
}

/// One multi-rank binary across the nodes, counted as `cargo xtask test` counts it.
fn run_binary(nodes: &TwoNodes, binary: &Binary, as_root: bool, limit: Duration) -> Tally {
    let mut launch = nodes.launch(&binary.path, &[], as_root);
    if binary.checked() {
        launch.export("COLLECTIVES_CHECK", "1");
    }
    let what = format!("two nodes: mpirun -n {RANKS} {}", binary.name);
    println!("== {what} ==");
    let outcome = match exec::run_tee(launch.command(), Some(limit), true) {
        Ok(o) => o,
        Err(e) => {
            let mut t = Tally::default();
            t.fail(1, format!("{what}: cannot start: {e}"));
            return t;
        }
    };
    let ended = if outcome.timed_out {
        format!("timeout after {} s", limit.as_secs())
    } else {
        outcome.describe()
    };
    let tally = match binary.kind {
        Kind::Example => {
            let mut t = Tally::default();
            if outcome.success() {
                t.pass(1);
            } else {
                t.fail(1, format!("{what}: {ended}"));
            }
            t
        }
        Kind::MpiTest => mpirun::count_mpi_test(
            &what,
            parse_mpi_tests(&outcome.output),
            outcome.success(),
            &ended,
        ),
    };
    if tally.failed > 0 {
        println!("xtask: {ended}; rerun with: {}", launch.shell_line());
    }
    tally
}

/// [`collbench_commands`] across the nodes; the doctor's report is kept in the stage's folder
/// and checked with [`doctor_missing`].
fn collbench_runs(nodes: &TwoNodes, exe: &Path, as_root: bool, limit: Duration) -> Tally {
    let mut tally = Tally::default();
    for args in collbench_commands() {
        let launch = nodes.launch(exe, &args, as_root);
        let what = format!("two nodes: mpirun -n {RANKS} collbench {}", args.join(" "));
        println!("== {what} ==");
        let doctor = args[0] == "doctor";
        match exec::run_tee(launch.command(), Some(limit), doctor) {
            Ok(o) if o.success() => {
                if doctor {
                    let file = nodes.dir.join("doctor.txt");
                    let _ = std::fs::write(&file, &o.output);
                    let missing = doctor_missing(&o.output);
                    if missing.is_empty() {
                        tally.pass(1);
                    } else {
                        tally.fail(
                            1,
                            format!("{what}: the report does not name {}", missing.join(", ")),
                        );
                    }
                } else {
                    tally.pass(1);
                }
            }
            Ok(o) => {
                if !doctor {
                    print!("{}", o.output);
                }
                tally.fail(1, format!("{what}: {}", o.describe()));
                println!("xtask: rerun with: {}", launch.shell_line());
            }
            Err(e) => tally.fail(1, format!("{what}: cannot start: {e}")),
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> TwoNodes {
        TwoNodes::new(4242, Path::new("/t/netns"))
    }

    #[test]
    fn the_layout_has_two_addressed_nodes_and_a_decoy_each() {
        let n = nodes();
        let lines: Vec<String> = n.setup_commands().iter().map(|c| c.join(" ")).collect();
        assert_eq!(lines[0], "netns add xtask-4242-node1");
        assert_eq!(lines[2], "link add xt4242a type veth peer name xt4242b");
        for (i, ns) in [(1, "xtask-4242-node1"), (2, "xtask-4242-node2")] {
            for want in [
                format!("-n {ns} addr add 10.77.0.{i}/24 dev eth0"),
                format!("-n {ns} link set eth0 up"),
                format!("-n {ns} link add docker0 type bridge"),
                format!("-n {ns} addr add 172.17.0.1/16 dev docker0"),
                format!("-n {ns} link set docker0 up"),
            ] {
                assert!(lines.contains(&want), "{want} not in {lines:?}");
            }
        }
        assert!(n.veth.iter().all(|v| v.len() <= 15));
        assert_eq!(
            n.teardown_commands(),
            [
                ["netns", "del", "xtask-4242-node1"],
                ["netns", "del", "xtask-4242-node2"]
            ]
        );
        assert_eq!(n.hostfile(), "10.77.0.1 slots=2\n10.77.0.2 slots=2\n");
    }

    #[test]
    fn the_agent_maps_each_node_to_its_namespace() {
        let s = nodes().agent_script();
        assert!(s.contains("  10.77.0.2|xt-node2) ns=xtask-4242-node2; name=xt-node2 ;;\n"));
        assert!(s.ends_with(
            "exec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $name && $*\"\n"
        ));
    }

    #[test]
    fn the_agent_runs_a_command_on_the_named_node() {
        // The script itself, with `ip` and `unshare` replaced by echoes of their arguments.
        let dir = std::env::temp_dir().join(format!("xtask-agent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = nodes()
            .agent_script()
            .replace("exec ip netns exec", "echo ip netns exec");
        let path = dir.join("agent.sh");
        std::fs::write(&path, script).unwrap();
        let out = Command::new("sh")
            .arg(&path)
            .args(["-x", "10.77.0.2", "orted", "-mca", "ess", "\"env\""])
            .output()
            .unwrap();
        let bad = Command::new("sh")
            .arg(&path)
            .args(["10.9.9.9", "x"])
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ip netns exec xtask-4242-node2 unshare --uts sh -c hostname xt-node2 && orted -mca ess \"env\"\n"
        );
        assert!(!bad.status.success());
        assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown node 10.9.9.9"));
    }

    #[test]
    fn launches_start_in_node_one_pinned_to_the_link() {
        let l = nodes().launch(Path::new("/t/mpi_dead_peer-1"), &[], true);
        assert_eq!(l.program, PathBuf::from("ip"));
        let line = l.args().join(" ");
        assert!(
            line.starts_with(
                "netns exec xtask-4242-node1 unshare --uts sh -c hostname \"$0\" && exec \"$@\" \
                 xt-node1 mpirun -n 4 --allow-run-as-root --oversubscribe --hostfile /t/netns/hostfile"
            ),
            "{line}"
        );
        for want in [
            "--mca plm_rsh_agent /t/netns/rsh-agent.sh",
            "--mca btl self,vader,tcp",
            "--mca btl_tcp_if_include eth0",
            "--mca oob_tcp_if_include eth0",
        ] {
            assert!(line.contains(want), "{want} not in {line}");
        }
        assert!(line.ends_with(" /t/mpi_dead_peer-1"));
        // A rank may leave the dead-peer test without mpirun ending the job.
        assert!(l.env.iter().any(|(k, _)| k == mpirun::EXIT_WITHOUT_SYNC.0));
    }

    #[test]
    fn skips_say_why() {
        let ip = Path::new("/usr/sbin/ip");
        assert!(cannot_make_nodes(false, Some(ip), Some(ip))
            .unwrap()
            .contains("not running as root"));
        assert!(cannot_make_nodes(true, None, Some(ip))
            .unwrap()
            .contains("iproute2"));
        assert!(cannot_make_nodes(true, Some(ip), None)
            .unwrap()
            .contains("unshare"));
        assert_eq!(cannot_make_nodes(true, Some(ip), Some(ip)), None);
    }

    #[test]
    fn the_doctor_must_name_both_nodes_the_decoy_and_the_settings() {
        let good = "xt-node1 ... xt-node2\n  docker0 (172.17.0.1/16 fe80::1/64) is up\n\
                    NCCL_SOCKET_IFNAME==eth0\nOMPI_MCA_btl_tcp_if_include=eth0\n\
                    OMPI_MCA_oob_tcp_if_include=eth0\n";
        assert!(doctor_missing(good).is_empty());
        assert_eq!(
            doctor_missing("xt-node1"),
            [
                "xt-node2",
                "docker0 (172.17.0.1/16",
                "NCCL_SOCKET_IFNAME==eth0",
                "OMPI_MCA_btl_tcp_if_include=eth0",
                "OMPI_MCA_oob_tcp_if_include=eth0"
            ]
        );
        assert_eq!(
            collbench_commands().len(),
            1 + crate::bench::COLLECTIVES.len()
        );
    }
}
