//! A one-machine Slurm in `cargo xtask test`: `munged`, `slurmctld` and `slurmd` from Debian's
//! packages, started with a configuration written under `target/xtask-slurm/` (its own munge key
//! and socket, its own ports, state and logs: nothing of the machine's own Slurm or munge is
//! touched), then collbench and an example launched the ways our users launch them:
//!
//! | launch | checked |
//! |---|---|
//! | `srun --mpi=pmix -n 4 01_all_reduce` | exit 0, `4 ranks ... correct` |
//! | `srun --mpi=pmix -n 4 collbench allreduce ... -c 1` | exit 0 (a wrong value exits 1), a table |
//! | `sbatch --wait -n 4 examples/slurm/collbench.sbatch` | exit 0; its output holds the doctor's `4 rank(s)` report and a table |
//! | `sbatch --wait -n 4 examples/slurm/all_reduce.sbatch` | exit 0; its output says `4 ranks ... correct` |
//! | `salloc -n 4 mpirun -n 4 01_all_reduce` | exit 0, `4 ranks ... correct` |
//!
//! Every launch asks for `--overcommit`: 4 tasks on however few cores the machine has. Where the
//! machine cannot start them (not root, a program missing, a daemon that does not come up), the
//! stage prints one line saying why and is counted as skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::exec;
use crate::host::{self, Signal, Target};
use crate::summary::{Step, Tally};
use crate::{artifacts, binaries, cargo, jobs};

/// Tasks of every launch.
pub const TASKS: u32 = 4;

/// The stage's line in the summary.
pub const LABEL: &str = "Slurm (srun --mpi=pmix, sbatch, salloc + mpirun; 4 tasks)";

/// The programs the stage needs, with the Debian package of each.
pub const PROGRAMS: [(&str, &str); 7] = [
    ("munged", "munge"),
    ("slurmctld", "slurmctld"),
    ("slurmd", "slurmd"),
    ("srun", "slurm-client"),
    ("sbatch", "slurm-client"),
    ("salloc", "slurm-client"),
    ("sinfo", "slurm-client"),
];

/// How long the daemons get to come up.
const START_LIMIT: Duration = Duration::from_secs(30);

/// How long one launch may take.
const LAUNCH_LIMIT: Duration = Duration::from_secs(180);

/// The one-machine cluster's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Where its configuration, key, socket, state and logs live.
    pub dir: PathBuf,
    /// This machine's short host name, the node's name.
    pub host: String,
    /// CPUs of the node.
    pub cpus: usize,
    /// `slurmctld`'s port; `slurmd` takes the next one.
    pub port: u16,
}

impl Cluster {
    /// The configuration file's path (`SLURM_CONF`).
    pub fn conf_path(&self) -> PathBuf {
        self.dir.join("slurm.conf")
    }

    /// munged's socket.
    pub fn munge_socket(&self) -> PathBuf {
        self.dir.join("munge").join("socket")
    }

    /// The `slurm.conf` of the cluster: one node, one partition, munge through our own socket, no
    /// cgroups (process tracking by `/proc`), no accounting.
    pub fn conf(&self) -> String {
        let d = self.dir.display();
        let socket = self.munge_socket();
        format!(
            "# Written by `cargo xtask test`: a one-machine Slurm for the tests.\n\
             ClusterName=xtask\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             ReturnToService=2\n\
             MpiDefault=none\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=xtask Nodes={host} Default=YES MaxTime=30 State=UP OverSubscribe=FORCE:{TASKS}\n",
            host = self.host,
            socket = socket.display(),
            ctld = self.port,
            slurmd = self.port + 1,
            cpus = self.cpus,
        )
    }

    /// A Slurm client command with this cluster's `SLURM_CONF`, and Open MPI's ranks yielding
    /// the CPU while they wait (`--overcommit` puts more tasks than cores on the node; ranks that
    /// spin would take turns only at the scheduler's tick). Slurm passes the environment on to
    /// the tasks.
    pub fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", self.conf_path())
            .env("OMPI_MCA_mpi_yield_when_idle", "1");
        cmd
    }
}

/// Why the stage cannot run here, from whether we are root and which of [`PROGRAMS`] were found;
/// `None` when it can try.
pub fn cannot_start(as_root: bool, missing: &[&str]) -> Option<String> {
    if !as_root {
        return Some(
            "not running as root, so munged, slurmctld and slurmd cannot be started".into(),
        );
    }
    if !missing.is_empty() {
        return Some(format!(
            "{} not found (Debian: munge slurmctld slurmd slurm-client; `cargo xtask deps` \
             installs them as root)",
            missing.join(", ")
        ));
    }
    None
}

/// A program of [`PROGRAMS`] on `PATH` or in `/usr/sbin`, `/sbin`.
fn find(name: &str) -> Option<PathBuf> {
    host::which_in_path(name).or_else(|| {
        ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| host::is_executable(p))
    })
}

/// Two free TCP ports in a row, by asking the kernel for one and checking the next.
fn free_ports() -> Option<u16> {
    for _ in 0..20 {
        let first = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
        let port = first.local_addr().ok()?.port();
        if port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return Some(port);
        }
    }
    None
}

/// The short host name (`/proc/sys/kernel/hostname` up to the first dot).
fn short_host() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().split('.').next()?.to_owned();
    (!name.is_empty()).then_some(name)
}

/// The running daemons: stopped (`SIGTERM` by their pid files) when dropped.
struct Running {
    pid_files: Vec<PathBuf>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for file in &self.pid_files {
            let pid = std::fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            if let Some(pid) = pid.filter(|p| *p > 1) {
                if let Err(e) = host::send_signal(Signal::Term, Target::Process(pid)) {
                    eprintln!("xtask: stopping the Slurm stage's daemon {pid}: {e}");
                }
            }
        }
    }
}

/// Runs `cmd` to its end; the error names `what` and what it printed.
fn run_quiet(mut cmd: Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Writes the key and the configuration, starts munged, slurmctld and slurmd, and waits until the
/// node is idle.
fn start(c: &Cluster) -> Result<Running, String> {
    let _ = std::fs::remove_dir_all(&c.dir);
    let munge = c.dir.join("munge");
    for d in [munge.as_path(), &c.dir.join("state"), &c.dir.join("spool")] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    use std::os::unix::fs::PermissionsExt;
    let key = munge.join("munge.key");
    let mut bytes = vec![0u8; 1024];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .and_then(|()| std::fs::write(&key, &bytes))
        .and_then(|()| std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)))
        .and_then(|()| std::fs::set_permissions(&munge, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| format!("cannot write the munge key: {e}"))?;
    std::fs::write(c.conf_path(), c.conf()).map_err(|e| format!("cannot write slurm.conf: {e}"))?;
    let mut running = Running {
        pid_files: Vec::new(),
    };
    let mut munged = Command::new(find("munged").unwrap_or_else(|| "munged".into()));
    munged
        .arg("--force")
        .arg(format!("--key-file={}", key.display()));
    for (flag, file) in [
        ("--socket", c.munge_socket()),
        ("--pid-file", munge.join("munged.pid")),
        ("--log-file", c.dir.join("munged.log")),
        ("--seed-file", munge.join("seed")),
    ] {
        munged.arg(format!("{flag}={}", file.display()));
    }
    run_quiet(munged, "munged")?;
    running.pid_files.push(munge.join("munged.pid"));
    let conf = c.conf_path().display().to_string();
    let mut ctld = Command::new(find("slurmctld").unwrap_or_else(|| "slurmctld".into()));
    ctld.args(["-f", &conf]);
    run_quiet(ctld, "slurmctld")?;
    running.pid_files.push(c.dir.join("slurmctld.pid"));
    let mut slurmd = Command::new(find("slurmd").unwrap_or_else(|| "slurmd".into()));
    slurmd.args(["-f", &conf, "-N", &c.host]);
    run_quiet(slurmd, "slurmd")?;
    running.pid_files.push(c.dir.join("slurmd.pid"));
    let started = Instant::now();
    loop {
        let state = c
            .client("sinfo")
            .args(["-h", "-o", "%T", "-n", &c.host])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        if state == "idle" {
            return Ok(running);
        }
        if started.elapsed() > START_LIMIT {
            return Err(format!(
                "the node is `{state}`, not idle, {} s after start (logs in {})",
                START_LIMIT.as_secs(),
                c.dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What a launch's output must contain to pass.
pub fn missing_in(output: &str, wanted: &[&str]) -> Vec<String> {
    wanted
        .iter()
        .filter(|w| !output.contains(**w))
        .map(|w| format!("`{w}`"))
        .collect()
}

/// The lines an all-reduce example run on [`TASKS`] ranks prints.
const EXAMPLE_SAYS: [&str; 2] = ["01_all_reduce: 4 ranks", ": correct"];

/// Runs one launch (`cmd`, shown as `what`), then checks its exit and that `read` (its output, or a
/// file it wrote) holds `wanted`.
fn check(tally: &mut Tally, what: &str, cmd: Command, wanted: &[&str], read: Option<&Path>) {
    println!("== Slurm: {what} ==");
    match exec::run_tee(cmd, Some(LAUNCH_LIMIT), true) {
        Ok(o) if o.success() => {
            let text = match read {
                Some(file) => {
                    let text = std::fs::read_to_string(file).unwrap_or_default();
                    print!("{text}");
                    text
                }
                None => o.output,
            };
            let missing = missing_in(&text, wanted);
            if missing.is_empty() {
                tally.pass(1);
            } else {
                tally.fail(
                    1,
                    format!("Slurm: {what}: no {} in its output", missing.join(", ")),
                );
            }
        }
        Ok(o) => tally.fail(1, format!("Slurm: {what}: {}", o.describe())),
        Err(e) => tally.fail(1, format!("Slurm: {what}: cannot start: {e}")),
    }
}

/// The stage's step for `cargo xtask test`.
pub fn steps(root: &Path, as_root: bool) -> Vec<Step> {
    let label = LABEL.to_owned();
    let skipped = |why: String| {
        println!("Slurm stage skipped: {why}");
        vec![Step {
            label: label.clone(),
            tally: None,
        }]
    };
    if let Some(why) = crate::fresh::inside_why() {
        return skipped(why);
    }
    let missing: Vec<&str> = PROGRAMS
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| find(p).is_none())
        .collect();
    if let Some(why) = cannot_start(as_root, &missing) {
        return skipped(why);
    }
    let (Some(host), Some(port)) = (short_host(), free_ports()) else {
        return skipped("no host name or no free TCP port for slurmctld".into());
    };
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
            "--bins",
        ],
    );
    let mut tally = Tally::default();
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            tally.fail(1, format!("Slurm: build: {e}"));
            return vec![Step {
                label,
                tally: Some(tally),
            }];
        }
    };
    let exe = |name: &str, kind: &str| {
        built
            .iter()
            .find(|a| a.name == name && a.is(kind) && !a.test_profile)
            .map(|a| a.executable.clone())
    };
    let (Some(example), Some(collbench)) = (
        exe("01_all_reduce", "example"),
        exe(crate::bench::BENCH_BINARY, "bin"),
    ) else {
        tally.fail(1, "Slurm: cargo built no 01_all_reduce or collbench");
        return vec![Step {
            label,
            tally: Some(tally),
        }];
    };
    let cluster = Cluster {
        dir: root.join("target").join("xtask-slurm"),
        host,
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        port,
    };
    println!(
        "== Slurm: munged, slurmctld, slurmd with {} ==",
        cluster.conf_path().display()
    );
    let running = match start(&cluster) {
        Ok(r) => r,
        Err(why) => return skipped(format!("cannot start a one-machine Slurm here: {why}")),
    };
    let n = TASKS.to_string();
    let scripts = root.join("examples").join("slurm");
    let small = [
        "allreduce",
        "-b",
        "8",
        "-e",
        "4K",
        "-f",
        "8",
        "-n",
        "5",
        "-w",
        "1",
        "-c",
        "1",
    ];

    let mut srun = cluster.client("srun");
    srun.args(["--mpi=pmix", "--overcommit", "-n", &n])
        .arg(&example);
    check(
        &mut tally,
        "srun --mpi=pmix -n 4 01_all_reduce",
        srun,
        &EXAMPLE_SAYS,
        None,
    );

    let mut srun = cluster.client("srun");
    srun.args(["--mpi=pmix", "--overcommit", "-n", &n])
        .arg(&collbench)
        .args(small);
    check(
        &mut tally,
        &format!("srun --mpi=pmix -n 4 collbench {}", small.join(" ")),
        srun,
        &["nranks 4"],
        None,
    );

    for (script, var, exe, wanted) in [
        (
            "collbench.sbatch",
            "COLLBENCH",
            &collbench,
            &["# collbench doctor: 4 rank(s)", "nranks 4"][..],
        ),
        ("all_reduce.sbatch", "EXAMPLE", &example, &EXAMPLE_SAYS[..]),
    ] {
        let out = cluster.dir.join(format!("{script}.out"));
        let mut sbatch = cluster.client("sbatch");
        sbatch
            .args(["--wait", "--overcommit", "-n", &n])
            .arg(format!("--output={}", out.display()))
            .arg(format!("--export=ALL,{var}={}", exe.display()))
            .arg(scripts.join(script));
        check(
            &mut tally,
            &format!("sbatch --wait -n 4 examples/slurm/{script}"),
            sbatch,
            wanted,
            Some(&out),
        );
    }

    let mut salloc = cluster.client("salloc");
    salloc
        .args([
            "--overcommit",
            "-n",
            &n,
            "mpirun",
            "--allow-run-as-root",
            "-n",
            &n,
        ])
        .arg(&example)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    check(
        &mut tally,
        "salloc -n 4 mpirun -n 4 01_all_reduce",
        salloc,
        &EXAMPLE_SAYS,
        None,
    );
    drop(running);
    vec![Step {
        label,
        tally: Some(tally),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Cluster {
        Cluster {
            dir: PathBuf::from("/t/slurm"),
            host: "vm".into(),
            cpus: 2,
            port: 16817,
        }
    }

    #[test]
    fn the_configuration_is_self_contained() {
        let conf = cluster().conf();
        for want in [
            "SlurmctldHost=vm(127.0.0.1)\n",
            "AuthInfo=socket=/t/slurm/munge/socket\n",
            "SlurmctldPort=16817\n",
            "SlurmdPort=16818\n",
            "StateSaveLocation=/t/slurm/state\n",
            "ProctrackType=proctrack/linuxproc\n",
            "NodeName=vm NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n",
            "PartitionName=xtask Nodes=vm Default=YES",
        ] {
            assert!(conf.contains(want), "{want} not in\n{conf}");
        }
        // Every path it names lies under the stage's folder.
        for line in conf.lines().filter(|l| l.contains("=/")) {
            assert!(line.contains("/t/slurm/"), "{line}");
        }
        let cmd = cluster().client("srun");
        assert!(cmd
            .get_envs()
            .any(|(k, v)| k == "SLURM_CONF"
                && v == Some(std::ffi::OsStr::new("/t/slurm/slurm.conf"))));
    }

    #[test]
    fn skips_say_why() {
        assert!(cannot_start(false, &[])
            .unwrap()
            .contains("not running as root"));
        let why = cannot_start(true, &["munged", "srun"]).unwrap();
        assert!(why.starts_with("munged, srun not found"), "{why}");
        assert_eq!(cannot_start(true, &[]), None);
    }

    #[test]
    fn outputs_are_checked_for_what_they_must_say() {
        let out = "01_all_reduce: 4 ranks, sum [10.0]: correct\n";
        assert!(missing_in(out, &EXAMPLE_SAYS).is_empty());
        assert_eq!(
            missing_in("01_all_reduce: 1 ranks", &EXAMPLE_SAYS),
            ["`01_all_reduce: 4 ranks`", "`: correct`"]
        );
    }

    #[test]
    fn two_free_ports_are_found() {
        let p = free_ports().unwrap();
        assert!(p > 0 && p < u16::MAX);
    }
}
