//! Running a child process while echoing its output and keeping a copy, with an optional
//! wall-clock limit that takes down the whole process tree.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::host::{self, Signal, Target};

/// How long a timed-out launch gets to exit after `SIGTERM` before everything is `SIGKILL`ed.
const TERM_GRACE: Duration = Duration::from_secs(10);

/// How long to wait for the output pipes to close once the child is gone.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// How long a `SIGKILL`ed child gets to be reaped before it is reported as surviving.
const KILL_GRACE: Duration = Duration::from_secs(5);

/// What a finished (or killed) child left behind.
#[derive(Debug)]
pub struct Outcome {
    /// The exit status; `None` only when waiting for the child failed.
    pub status: Option<ExitStatus>,
    /// Whether the wall-clock limit was hit and the process tree killed.
    pub timed_out: bool,
    /// stdout and stderr, interleaved line by line as they arrived.
    pub output: String,
    /// What went wrong while taking the process tree down after a timeout: signals that could
    /// not be sent, processes that survived. Empty when nothing did.
    pub kill_errors: Vec<String>,
}

impl Outcome {
    /// Whether the child exited with status 0 in time.
    pub fn success(&self) -> bool {
        !self.timed_out && self.kill_errors.is_empty() && self.status.is_some_and(|s| s.success())
    }

    /// A short description of how the child ended: `exit 0`, `exit 1`, `signal 9`, `timeout`,
    /// or `timeout; <what failed while killing it>`.
    pub fn describe(&self) -> String {
        if self.timed_out {
            if self.kill_errors.is_empty() {
                return "timeout".to_owned();
            }
            return format!("timeout; {}", self.kill_errors.join("; "));
        }
        match self.status {
            Some(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(sig)) => format!("signal {sig}"),
                (None, None) => "unknown status".to_owned(),
            },
            None => "lost".to_owned(),
        }
    }
}

/// Runs `cmd` and returns its stdout and stderr captured; with `echo`, also copies them to ours
/// as lines arrive.
///
/// With `limit`, the child is started in a new process group; when the limit passes, the group
/// gets `SIGTERM` (so `mpirun` can take its ranks down), then after a grace period the group and
/// every process that descended from the child get `SIGKILL`. The signals are sent with kill(2);
/// one that fails for any reason but the target being gone already is recorded in
/// [`Outcome::kill_errors`], and so is a child that outlives `SIGKILL`: such a run never counts as
/// a success, and this function does not wait forever for it.
///
/// # Errors
/// When the child cannot be started.
pub fn run_tee(mut cmd: Command, limit: Option<Duration>, echo: bool) -> std::io::Result<Outcome> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if limit.is_some() {
        cmd.process_group(0);
    }
    let mut child = cmd.spawn()?;
    let captured = Arc::new(Mutex::new(Vec::<u8>::new()));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut readers = 0;
    if let Some(out) = child.stdout.take() {
        readers += 1;
        let to: Box<dyn Write + Send> = if echo {
            Box::new(std::io::stdout())
        } else {
            Box::new(std::io::sink())
        };
        pump(out, to, Arc::clone(&captured), done_tx.clone());
    }
    if let Some(err) = child.stderr.take() {
        readers += 1;
        let to: Box<dyn Write + Send> = if echo {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::sink())
        };
        pump(err, to, Arc::clone(&captured), done_tx.clone());
    }
    drop(done_tx);

    let started = Instant::now();
    let mut timed_out = false;
    let mut kill_errors = Vec::new();
    let status = match limit {
        None => child.wait().ok(),
        Some(limit) => loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= limit => {
                    timed_out = true;
                    let (status, errors) = kill_tree(&mut child);
                    kill_errors = errors;
                    break status;
                }
                Ok(None) => thread::sleep(Duration::from_millis(50)),
                Err(_) => break None,
            }
        },
    };

    // Pipes close when the last process holding them exits; a stray grandchild may keep
    // them open, so wait only a little for the readers.
    let drain_deadline = Instant::now() + DRAIN_GRACE;
    for _ in 0..readers {
        let left = drain_deadline.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    let output = {
        let bytes = captured
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok(Outcome {
        status,
        timed_out,
        output,
        kill_errors,
    })
}

/// Copies `from` to `to` line by line on a thread of its own, appending each line to `captured`;
/// sends on `done` at end of input.
fn pump<R, W>(from: R, mut to: W, captured: Arc<Mutex<Vec<u8>>>, done: mpsc::Sender<()>)
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let _ = to.write_all(&line);
                    let _ = to.flush();
                    captured
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .extend_from_slice(&line);
                }
            }
        }
        let _ = done.send(());
    });
}

/// Takes down a child started in its own process group, and everything it started.
///
/// Returns the child's status when it was reaped, and what went wrong on the way: a signal that
/// could not be sent (other than to a process already gone), or a child still running after
/// `SIGKILL` and [`KILL_GRACE`].
fn kill_tree(child: &mut std::process::Child) -> (Option<ExitStatus>, Vec<String>) {
    let pid = child.id();
    let tree = host::descendants(pid);
    let group = Target::Group(pid);
    let mut errors = Vec::new();
    let mut send = |signal, target| {
        if let Err(e) = host::send_signal(signal, target) {
            errors.push(e);
        }
    };
    send(Signal::Term, group);
    let mut status = wait_for(child, TERM_GRACE);
    send(Signal::Kill, group);
    for process in tree {
        if process.is_alive() {
            send(Signal::Kill, Target::Process(process.pid));
        }
    }
    if status.is_none() {
        status = wait_for(child, KILL_GRACE);
    }
    if status.is_none() {
        errors.push(format!(
            "process {pid} still running {} s after SIGKILL",
            KILL_GRACE.as_secs()
        ));
    }
    (status, errors)
}

/// The child's status once it has exited, polling for at most `grace`; `None` if it has not.
fn wait_for(child: &mut std::process::Child, grace: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Ok(None) | Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_both_streams_and_status() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let outcome = run_tee(cmd, None, false).unwrap();
        assert!(!outcome.success());
        assert_eq!(outcome.describe(), "exit 3");
        assert!(outcome.output.contains("out\n"));
        assert!(outcome.output.contains("err\n"));
    }

    #[test]
    fn limit_kills_the_group_and_grandchildren_in_other_groups() {
        // The grandchild moves to a process group of its own, as Open MPI's ranks do,
        // and ignores SIGTERM.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "setsid sh -c 'trap \"\" TERM; echo $$; sleep 30' & echo started; wait",
        ]);
        let t0 = Instant::now();
        let outcome = run_tee(cmd, Some(Duration::from_millis(300)), false).unwrap();
        assert!(outcome.timed_out);
        assert_eq!(outcome.describe(), "timeout", "{:?}", outcome.kill_errors);
        assert!(!outcome.success());
        // The shell died of the SIGTERM sent to its group: it was delivered, and reaped.
        let status = outcome.status.expect("the child was reaped");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGTERM),
            "{status:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(25));
        let grandchild: u32 = outcome
            .output
            .lines()
            .find_map(|l| l.trim().parse().ok())
            .expect("grandchild pid printed");
        thread::sleep(Duration::from_millis(200));
        let stat = std::fs::read_to_string(format!("/proc/{grandchild}/stat"));
        assert!(
            stat.is_err() || stat.is_ok_and(|s| s.contains(") Z")),
            "grandchild {grandchild} survived"
        );
    }

    #[test]
    fn a_failed_kill_fails_the_run_and_is_described() {
        let mut outcome = Outcome {
            status: None,
            timed_out: true,
            output: String::new(),
            kill_errors: vec!["cannot send SIGKILL to process 7: Operation not permitted".into()],
        };
        assert!(!outcome.success());
        assert_eq!(
            outcome.describe(),
            "timeout; cannot send SIGKILL to process 7: Operation not permitted"
        );
        // Even a zero exit does not make up for a process that could not be signalled.
        outcome.timed_out = false;
        outcome.status = Some(std::os::unix::process::ExitStatusExt::from_raw(0));
        assert!(!outcome.success());
    }

    #[test]
    fn a_child_that_ends_in_time_is_not_signalled() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 0"]);
        let outcome = run_tee(cmd, Some(Duration::from_secs(20)), false).unwrap();
        assert!(outcome.success());
        assert!(!outcome.timed_out && outcome.kill_errors.is_empty());
    }
}
