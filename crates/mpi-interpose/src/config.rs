//! The interposer's settings, read once from the environment.
//!
//! | variable | values | effect |
//! |---|---|---|
//! | `COLLECTIVES_INTERPOSE_LOG` | `1` | one line on stderr per decision (which calls take the interposer's path, by which method, and why others pass through) |
//! | `COLLECTIVES_INTERPOSE_DISABLE` | `1` | every call passes straight through to the real MPI |
//! | `COLLECTIVES_INTERPOSE_METHOD` | `device`, `one-shot`, `staged` | force a method where it is open (device only with a CUDA-aware MPI) |
//! | `COLLECTIVES_INTERPOSE_COSTS` | `name=value,...` | replace entries of the cost model's table ([`Costs`] field names) |
//! | `COLLECTIVES_INTERPOSE_CALIBRATE` | `1` | measure the GPU's entries of the table (launch, pack, mapped writes, DMA) once per device at its first message; `COLLECTIVES_INTERPOSE_COSTS` still has the last word |
//! | `COLLECTIVES_INTERPOSE_CUDA_AWARE` | `0`, `1` | override the detection of a CUDA-aware MPI (`MPIX_Query_cuda_support`) |
//! | `COLLECTIVES_INTERPOSE_HOST_PACK` | `1`, `send`, `recv` | testing: host buffers of decoded types also take the interposer's byte path (packed by the CPU reference), for sends and receives, sends only or receives only |
//! | `COLLECTIVES_INTERPOSE_RELAUNCH` | `0` | launch the pack and unpack kernels one by one with `cuLaunchKernel` instead of through CUDA graphs (`datatype_pack::gpu::GpuOptions::relaunch` and, for the unpacks of the receives one call completes, `datatype_pack::gpu::Batch`; on by default: about 2 µs less per kernel waited for) |
//! | `COLLECTIVES_INTERPOSE_DIRECT` | `0`, `1`, `carry` | the direct path between ranks of one node on `MPI_COMM_WORLD` (`crate::direct`): `1` lends a send's device staging to its receiver, which unpacks from it over CUDA IPC, where both sides allow it; `0` (the default) sends every message through the real MPI; `carry` (testing) also takes host buffers of the byte path and carries their packed bytes in the protocol's notes; the same value on every rank |
//! | `COLLECTIVES_INTERPOSE_WRITE` | `0` | with the direct path on, lend every send's staging instead of writing a send straight into the receive buffer its receiver offers (`crate::target`; on by default: one kernel, on the sender's GPU, instead of a pack and an unpack) |
//! | `COLLECTIVES_INTERPOSE_CHANNEL` | `0`, `1`, `shared` | with the direct path on, `1` opens a channel per pair and tag of `MPI_Sendrecv` calls whose both sides take short blocks (`crate::channel`): the pack and the peer's unpack go out as one graph at the call's start, ordered on the GPUs by a flag; `0` (the default) does not; `shared` (testing) also between ranks of one GPU |
//! | `COLLECTIVES_INTERPOSE_PROFILE` | `1`, `timeline` | host wall time of each phase of the interposer's calls and each call's timeline, summed, one table per rank on stderr at `MPI_Finalize` (`crate::profile`); `timeline`: the timelines alone, without the phases' clock reads |

use std::sync::OnceLock;

use crate::model::{Costs, Method};

/// Which host-buffer operations take the byte path in the testing mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostPack {
    /// Sends (and `MPI_Pack`).
    pub send: bool,
    /// Receives (and `MPI_Unpack`).
    pub recv: bool,
}

/// Whether and how the direct path runs (`crate::direct`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direct {
    /// Every message goes through the real MPI (the default).
    Off,
    /// Device staging is lent to the receiver over CUDA IPC where both sides allow it
    /// (`COLLECTIVES_INTERPOSE_DIRECT=1`).
    On,
    /// As `On`, and (testing) host buffers taken by the byte path have their packed bytes
    /// carried in the protocol's note instead of a CUDA IPC copy.
    Carry,
}

/// Whether the direct path opens channels (`crate::channel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Never (the default).
    Off,
    /// Between ranks of different GPUs (`COLLECTIVES_INTERPOSE_CHANNEL=1`).
    On,
    /// Testing: also between ranks of one GPU, whose spinning kernels wait for each other's
    /// time slices (slow, but every step of the channel runs on one GPU).
    Shared,
}

/// The settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Log decisions to stderr.
    pub log: bool,
    /// Pass everything through.
    pub disabled: bool,
    /// A forced method.
    pub method: Option<Method>,
    /// The cost table.
    pub costs: Costs,
    /// `COLLECTIVES_INTERPOSE_COSTS` as given, applied again after a calibration.
    pub costs_spec: Option<String>,
    /// Measure the GPU's costs at first use.
    pub calibrate: bool,
    /// An override of the CUDA-awareness detection.
    pub cuda_aware: Option<bool>,
    /// The host testing mode.
    pub host_pack: HostPack,
    /// Time the interposer's calls (their timelines) and print them at `MPI_Finalize`.
    pub profile: bool,
    /// Time the phases of the calls too (`COLLECTIVES_INTERPOSE_PROFILE=1`; off with
    /// `=timeline`, whose figures then carry only the timeline's own few clock reads).
    pub profile_phases: bool,
    /// Launch kernels through one-node CUDA graphs (off with `COLLECTIVES_INTERPOSE_RELAUNCH=0`).
    pub relaunch: bool,
    /// The direct path (`COLLECTIVES_INTERPOSE_DIRECT`).
    pub direct: Direct,
    /// The direct path's write landing: a send writes straight into a receive buffer its
    /// receiver offers (off with `COLLECTIVES_INTERPOSE_WRITE=0`).
    pub write: bool,
    /// The direct path's channels (`COLLECTIVES_INTERPOSE_CHANNEL`).
    pub channel: Channel,
    /// Settings that could not be read, to report once.
    pub problems: Vec<String>,
}

fn flag(v: Option<String>) -> bool {
    matches!(
        v.as_deref().map(str::trim),
        Some("1" | "yes" | "true" | "on")
    )
}

impl Config {
    /// The settings from a variable lookup (the environment, or a table in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let mut problems = Vec::new();
        let method = get("COLLECTIVES_INTERPOSE_METHOD").and_then(|v| {
            let m = Method::parse(&v);
            if m.is_none() && !v.trim().is_empty() {
                problems.push(format!(
                    "COLLECTIVES_INTERPOSE_METHOD={v} is not device, one-shot or staged"
                ));
            }
            m
        });
        let mut costs = Costs::default();
        let costs_spec = get("COLLECTIVES_INTERPOSE_COSTS");
        if let Some(spec) = &costs_spec {
            for bad in costs.apply(spec) {
                problems.push(format!("COLLECTIVES_INTERPOSE_COSTS: ignored `{bad}`"));
            }
        }
        let cuda_aware = match get("COLLECTIVES_INTERPOSE_CUDA_AWARE")
            .as_deref()
            .map(str::trim)
        {
            Some("1") => Some(true),
            Some("0") => Some(false),
            None | Some("") => None,
            Some(other) => {
                problems.push(format!(
                    "COLLECTIVES_INTERPOSE_CUDA_AWARE={other} is not 0 or 1"
                ));
                None
            }
        };
        let host_pack = match get("COLLECTIVES_INTERPOSE_HOST_PACK")
            .as_deref()
            .map(str::trim)
        {
            Some("1") => HostPack {
                send: true,
                recv: true,
            },
            Some("send") => HostPack {
                send: true,
                recv: false,
            },
            Some("recv") => HostPack {
                send: false,
                recv: true,
            },
            None | Some("" | "0") => HostPack::default(),
            Some(other) => {
                problems.push(format!(
                    "COLLECTIVES_INTERPOSE_HOST_PACK={other} is not 1, send or recv"
                ));
                HostPack::default()
            }
        };
        // `1`: the phases and the timelines; `timeline`: the timelines alone.
        let profile = get("COLLECTIVES_INTERPOSE_PROFILE");
        let timelines_only = profile.as_deref().map(str::trim) == Some("timeline");
        let profile_phases = flag(profile);
        let direct = match get("COLLECTIVES_INTERPOSE_DIRECT")
            .as_deref()
            .map(str::trim)
        {
            None | Some("" | "0") => Direct::Off,
            Some("1") => Direct::On,
            Some("carry") => Direct::Carry,
            Some(other) => {
                problems.push(format!(
                    "COLLECTIVES_INTERPOSE_DIRECT={other} is not 0, 1 or carry"
                ));
                Direct::Off
            }
        };
        let channel = match get("COLLECTIVES_INTERPOSE_CHANNEL")
            .as_deref()
            .map(str::trim)
        {
            None | Some("" | "0") => Channel::Off,
            Some("1") => Channel::On,
            Some("shared") => Channel::Shared,
            Some(other) => {
                problems.push(format!(
                    "COLLECTIVES_INTERPOSE_CHANNEL={other} is not 0, 1 or shared"
                ));
                Channel::Off
            }
        };
        Config {
            log: flag(get("COLLECTIVES_INTERPOSE_LOG")),
            disabled: flag(get("COLLECTIVES_INTERPOSE_DISABLE")),
            method,
            costs,
            costs_spec,
            calibrate: flag(get("COLLECTIVES_INTERPOSE_CALIBRATE")),
            cuda_aware,
            host_pack,
            profile: profile_phases || timelines_only,
            profile_phases,
            relaunch: !matches!(
                get("COLLECTIVES_INTERPOSE_RELAUNCH")
                    .as_deref()
                    .map(str::trim),
                Some("0" | "no" | "false" | "off")
            ),
            direct,
            write: !matches!(
                get("COLLECTIVES_INTERPOSE_WRITE").as_deref().map(str::trim),
                Some("0" | "no" | "false" | "off")
            ),
            channel,
            problems,
        }
    }
}

/// The process's settings, read on first use.
pub fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config::from_lookup(|k| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Config {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_values() {
        let c = from(&[]);
        assert!(!c.log && !c.disabled && !c.profile && !c.profile_phases && c.relaunch);
        assert!(c.write && !from(&[("COLLECTIVES_INTERPOSE_WRITE", "0")]).write);
        assert!(from(&[("COLLECTIVES_INTERPOSE_WRITE", "1")]).write);
        assert!(c.method.is_none() && c.cuda_aware.is_none());
        let t = from(&[("COLLECTIVES_INTERPOSE_PROFILE", " timeline ")]);
        assert!(t.profile && !t.profile_phases);
        assert_eq!(c.host_pack, HostPack::default());
        assert_eq!(c.direct, Direct::Off);
        assert_eq!(c.channel, Channel::Off);
        assert!(c.problems.is_empty());
        assert_eq!(
            from(&[("COLLECTIVES_INTERPOSE_CHANNEL", "1")]).channel,
            Channel::On
        );
        assert_eq!(
            from(&[("COLLECTIVES_INTERPOSE_CHANNEL", "shared")]).channel,
            Channel::Shared
        );
        let c = from(&[
            ("COLLECTIVES_INTERPOSE_DIRECT", "carry"),
            ("COLLECTIVES_INTERPOSE_LOG", "1"),
            ("COLLECTIVES_INTERPOSE_LOG", "1"),
            ("COLLECTIVES_INTERPOSE_METHOD", "staged"),
            ("COLLECTIVES_INTERPOSE_CUDA_AWARE", "0"),
            ("COLLECTIVES_INTERPOSE_HOST_PACK", "recv"),
            ("COLLECTIVES_INTERPOSE_COSTS", "dma_us=3"),
            ("COLLECTIVES_INTERPOSE_PROFILE", "1"),
            ("COLLECTIVES_INTERPOSE_RELAUNCH", "0"),
        ]);
        assert!(c.log && c.profile && c.profile_phases && !c.relaunch);
        assert_eq!(c.method, Some(Method::Staged));
        assert_eq!(c.cuda_aware, Some(false));
        assert_eq!(
            c.host_pack,
            HostPack {
                send: false,
                recv: true
            }
        );
        assert_eq!(c.costs.dma_us, 3.0);
        assert_eq!(c.direct, Direct::Carry);
        assert_eq!(
            from(&[("COLLECTIVES_INTERPOSE_DIRECT", "0")]).direct,
            Direct::Off
        );
        assert!(c.problems.is_empty());
    }

    #[test]
    fn bad_values_are_reported_and_ignored() {
        let c = from(&[
            ("COLLECTIVES_INTERPOSE_METHOD", "fast"),
            ("COLLECTIVES_INTERPOSE_CUDA_AWARE", "maybe"),
            ("COLLECTIVES_INTERPOSE_HOST_PACK", "both"),
            ("COLLECTIVES_INTERPOSE_COSTS", "x=1"),
            ("COLLECTIVES_INTERPOSE_DIRECT", "ipc"),
            ("COLLECTIVES_INTERPOSE_CHANNEL", "2"),
        ]);
        assert!(c.method.is_none() && c.cuda_aware.is_none());
        assert_eq!(c.host_pack, HostPack::default());
        assert_eq!(c.direct, Direct::Off);
        assert_eq!(c.channel, Channel::Off);
        assert_eq!(c.problems.len(), 6);
    }
}
