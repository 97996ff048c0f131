//! Running a child process while echoing its output and keeping a copy, with an optional
//! wall-clock limit that takes down the whole process tree.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::host;

/// How long a timed-out launch gets to exit after `SIGTERM` before everything is `SIGKILL`ed.
const TERM_GRACE: Duration = Duration::from_secs(10);

/// How long to wait for the output pipes to close once the child is gone.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// What a finished (or killed) child left behind.
#[derive(Debug)]
pub struct Outcome {
    /// The exit status; `None` only when waiting for the child failed.
    pub status: Option<ExitStatus>,
    /// Whether the wall-clock limit was hit and the process tree killed.
    pub timed_out: bool,
    /// stdout and stderr, interleaved line by line as they arrived.
    pub output: String,
}

impl Outcome {
    /// Whether the child exited with status 0 in time.
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    /// A short description of how the child ended: `exit 0`, `exit 1`, `signal 9`, `timeout`.
    pub fn describe(&self) -> String {
        if self.timed_out {
            return "timeout".to_owned();
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
/// every process that descended from the child get `SIGKILL`.
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
    let status = match limit {
        None => child.wait().ok(),
        Some(limit) => loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= limit => {
                    timed_out = true;
                    break kill_tree(&mut child);
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
fn kill_tree(child: &mut std::process::Child) -> Option<ExitStatus> {
    let pid = child.id();
    let tree = host::descendants(pid);
    let group = format!("-{pid}");
    host::kill("TERM", &group);
    let deadline = Instant::now() + TERM_GRACE;
    let mut status = None;
    while Instant::now() < deadline {
        if let Ok(Some(s)) = child.try_wait() {
            status = Some(s);
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    host::kill("KILL", &group);
    for process in tree {
        if process.is_alive() {
            host::kill("KILL", &process.pid.to_string());
        }
    }
    status.or_else(|| child.wait().ok())
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
        assert_eq!(outcome.describe(), "timeout");
        assert!(!outcome.success());
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
}
