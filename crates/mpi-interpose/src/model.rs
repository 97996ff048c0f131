//! Which way a packed message moves between device memory and the real MPI: a cost model over
//! three methods, with every input overridable from the environment.
//!
//! | method | send | receive |
//! |---|---|---|
//! | [`Method::Device`] | pack into device staging, hand the device buffer to a CUDA-aware MPI | receive into device staging, unpack |
//! | [`Method::OneShot`] | pack straight into mapped pinned host memory, send from the host | receive into mapped host memory, unpack reading it over the bus |
//! | [`Method::Staged`] | pack into device staging, copy to pinned host memory, send from the host | receive into pinned host memory, copy to the device, unpack |
//!
//! After TEMPI: one-shot moves each byte across the bus once, from the kernel, and wins for
//! small and medium objects; the staged copy's DMA engine is faster per byte and wins for large
//! ones; a CUDA-aware MPI pays a higher fixed cost for device buffers but moves large messages
//! between GPUs of a node fastest. Only the host methods are open when the MPI is not
//! CUDA-aware.

use std::fmt;

/// A way to move the packed bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Device pack, device staging buffer handed to a CUDA-aware MPI.
    Device,
    /// Pack straight into mapped pinned host memory; MPI sends from the host.
    OneShot,
    /// Device pack, copy to pinned host memory; MPI sends from the host.
    Staged,
}

impl Method {
    /// Every method, in the order ties are broken.
    pub const ALL: [Method; 3] = [Method::OneShot, Method::Staged, Method::Device];

    /// The name used in the log and in `COLLECTIVES_INTERPOSE_METHOD`.
    pub fn name(self) -> &'static str {
        match self {
            Method::Device => "device",
            Method::OneShot => "one-shot",
            Method::Staged => "staged",
        }
    }

    /// The method a name stands for (`device`, `one-shot` or `oneshot`, `staged`).
    pub fn parse(s: &str) -> Option<Method> {
        match s.trim().to_ascii_lowercase().as_str() {
            "device" => Some(Method::Device),
            "one-shot" | "oneshot" => Some(Method::OneShot),
            "staged" => Some(Method::Staged),
            _ => None,
        }
    }

    /// Whether the real MPI touches device memory in this method.
    pub fn needs_cuda_aware_mpi(self) -> bool {
        self == Method::Device
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The measured (or assumed) costs the model weighs. Bandwidths in GB/s (bytes per ns), times
/// in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// A kernel launch and the stream synchronization after it.
    pub launch_us: f64,
    /// A device pack kernel between device buffers, for blocks of at least 64 bytes.
    pub pack_gbps: f64,
    /// How much slower a pack is per byte for blocks of 1 byte than of 64 (scaled between).
    pub small_block_slowdown: f64,
    /// A pack kernel writing (or an unpack reading) mapped host memory across the bus.
    pub mapped_gbps: f64,
    /// A DMA copy between device and pinned host memory.
    pub dma_gbps: f64,
    /// The fixed cost of one DMA copy.
    pub dma_us: f64,
    /// What a CUDA-aware MPI adds to a message for a device buffer, over a host buffer.
    pub device_mpi_us: f64,
    /// A CUDA-aware MPI's bandwidth for device buffers (peer GPUs of one node).
    pub device_mpi_gbps: f64,
    /// The MPI's bandwidth for host buffers.
    pub host_mpi_gbps: f64,
}

impl Default for Costs {
    /// A table for a PCIe Gen5 / NVLink node of H100-class GPUs with Open MPI 4.1 (shared
    /// memory within the node); `COLLECTIVES_INTERPOSE_COSTS` replaces any entry.
    fn default() -> Self {
        Costs {
            launch_us: 8.0,
            pack_gbps: 1000.0,
            small_block_slowdown: 16.0,
            mapped_gbps: 12.0,
            dma_gbps: 25.0,
            dma_us: 10.0,
            device_mpi_us: 25.0,
            device_mpi_gbps: 150.0,
            host_mpi_gbps: 10.0,
        }
    }
}

/// What one message looks like to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Packed bytes.
    pub bytes: u64,
    /// Bytes of one contiguous block of the layout.
    pub block_len: u64,
}

impl Costs {
    /// Applies `name=value` pairs separated by commas (the names of the fields), returning the
    /// names it did not know or could not parse.
    pub fn apply(&mut self, spec: &str) -> Vec<String> {
        let mut bad = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                bad.push(part.to_owned());
                continue;
            };
            let Ok(v) = v.trim().parse::<f64>() else {
                bad.push(part.to_owned());
                continue;
            };
            if !(v.is_finite() && v > 0.0) {
                bad.push(part.to_owned());
                continue;
            }
            let slot = match k.trim() {
                "launch_us" => &mut self.launch_us,
                "pack_gbps" => &mut self.pack_gbps,
                "small_block_slowdown" => &mut self.small_block_slowdown,
                "mapped_gbps" => &mut self.mapped_gbps,
                "dma_gbps" => &mut self.dma_gbps,
                "dma_us" => &mut self.dma_us,
                "device_mpi_us" => &mut self.device_mpi_us,
                "device_mpi_gbps" => &mut self.device_mpi_gbps,
                "host_mpi_gbps" => &mut self.host_mpi_gbps,
                _ => {
                    bad.push(part.to_owned());
                    continue;
                }
            };
            *slot = v;
        }
        bad
    }

    /// The device pack's time for `s`, in microseconds (without the launch).
    fn pack_us(&self, s: Shape) -> f64 {
        let b = s.block_len.clamp(1, 64) as f64;
        // log-linear from `small_block_slowdown` at 1 byte to 1 at 64 bytes.
        let slow = self.small_block_slowdown.powf(1.0 - b.log2() / 6.0);
        s.bytes as f64 * slow / self.pack_gbps / 1000.0
    }

    /// The estimated time of one message of shape `s` by `m`, one side (pack and send, or
    /// receive and unpack), in microseconds.
    pub fn estimate_us(&self, m: Method, s: Shape) -> f64 {
        let bytes = s.bytes as f64;
        match m {
            Method::Device => {
                self.launch_us
                    + self.pack_us(s)
                    + self.device_mpi_us
                    + bytes / self.device_mpi_gbps / 1000.0
            }
            Method::OneShot => {
                let over_bus = bytes / self.mapped_gbps / 1000.0;
                self.launch_us + self.pack_us(s).max(over_bus) + bytes / self.host_mpi_gbps / 1000.0
            }
            Method::Staged => {
                self.launch_us
                    + self.pack_us(s)
                    + self.dma_us
                    + bytes / self.dma_gbps / 1000.0
                    + bytes / self.host_mpi_gbps / 1000.0
            }
        }
    }

    /// The cheapest method open for `s`, and the estimates of every method weighed (device
    /// only when `cuda_aware`). Ties go to the earlier method of [`Method::ALL`].
    pub fn choose(&self, s: Shape, cuda_aware: bool) -> (Method, Vec<(Method, f64)>) {
        let weighed: Vec<(Method, f64)> = Method::ALL
            .into_iter()
            .filter(|m| cuda_aware || !m.needs_cuda_aware_mpi())
            .map(|m| (m, self.estimate_us(m, s)))
            .collect();
        let best = weighed
            .iter()
            .fold(None::<(Method, f64)>, |acc, &(m, t)| match acc {
                Some((_, bt)) if bt <= t => acc,
                _ => Some((m, t)),
            })
            .map_or(Method::OneShot, |(m, _)| m);
        (best, weighed)
    }
}

/// What a calibration measured on one GPU (`COLLECTIVES_INTERPOSE_CALIBRATE=1`), each the best of
/// a few runs, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Bytes of the large transfers.
    pub bytes: u64,
    /// A pack of a few bytes, launch and synchronization.
    pub tiny_pack_us: f64,
    /// A pack of `bytes` in 1 KiB blocks between device buffers.
    pub pack_us: f64,
    /// The same pack into mapped pinned host memory.
    pub mapped_us: f64,
    /// A DMA copy of a few bytes to pinned host memory.
    pub tiny_dma_us: f64,
    /// A DMA copy of `bytes` to pinned host memory.
    pub dma_us: f64,
}

impl Costs {
    /// `self` with the entries `m` measured replaced (the MPI's entries stay). A measurement
    /// that is not positive and finite leaves its entry as it was.
    pub fn calibrated(mut self, m: Measured) -> Costs {
        let gbps = |us: f64, fixed: f64| {
            let t = us - fixed;
            (t.is_finite() && t > 0.0).then(|| m.bytes as f64 / (t * 1000.0))
        };
        if m.tiny_pack_us.is_finite() && m.tiny_pack_us > 0.0 {
            self.launch_us = m.tiny_pack_us;
        }
        if let Some(g) = gbps(m.pack_us, m.tiny_pack_us) {
            self.pack_gbps = g;
        }
        if let Some(g) = gbps(m.mapped_us, m.tiny_pack_us) {
            self.mapped_gbps = g;
        }
        if m.tiny_dma_us.is_finite() && m.tiny_dma_us > 0.0 {
            self.dma_us = m.tiny_dma_us;
        }
        if let Some(g) = gbps(m.dma_us, m.tiny_dma_us) {
            self.dma_gbps = g;
        }
        self
    }
}

/// The method for one message: `forced` when it is open, else the model's choice.
pub fn decide(
    costs: &Costs,
    forced: Option<Method>,
    s: Shape,
    cuda_aware: bool,
) -> (Method, Vec<(Method, f64)>) {
    let (best, weighed) = costs.choose(s, cuda_aware);
    match forced {
        Some(m) if cuda_aware || !m.needs_cuda_aware_mpi() => (m, weighed),
        _ => (best, weighed),
    }
}

/// `one-shot 12.3 us, staged 20.1 us` for the log.
pub fn describe(weighed: &[(Method, f64)]) -> String {
    weighed
        .iter()
        .map(|(m, t)| format!("{m} {t:.1} us"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(bytes: u64, block_len: u64) -> Shape {
        Shape { bytes, block_len }
    }

    #[test]
    fn names_round_trip() {
        for m in Method::ALL {
            assert_eq!(Method::parse(m.name()), Some(m));
        }
        assert_eq!(Method::parse(" OneShot "), Some(Method::OneShot));
        assert_eq!(Method::parse("nccl"), None);
    }

    #[test]
    fn without_cuda_aware_mpi_only_host_methods() {
        let c = Costs::default();
        for bytes in [1u64, 1 << 10, 1 << 20, 1 << 28] {
            let (m, weighed) = c.choose(shape(bytes, 8), false);
            assert_ne!(m, Method::Device);
            assert!(weighed.iter().all(|(m, _)| *m != Method::Device));
            assert_eq!(weighed.len(), 2);
        }
        // A forced device method is refused when the MPI cannot take device buffers.
        let (m, _) = decide(&c, Some(Method::Device), shape(1 << 20, 8), false);
        assert_ne!(m, Method::Device);
        let (m, _) = decide(&c, Some(Method::Device), shape(1 << 20, 8), true);
        assert_eq!(m, Method::Device);
        let (m, _) = decide(&c, Some(Method::Staged), shape(64, 8), false);
        assert_eq!(m, Method::Staged);
    }

    #[test]
    fn one_shot_for_small_then_staged_then_device() {
        let c = Costs::default();
        assert_eq!(c.choose(shape(4096, 8), false).0, Method::OneShot);
        assert_eq!(c.choose(shape(4096, 8), true).0, Method::OneShot);
        assert_eq!(c.choose(shape(64 << 20, 8), false).0, Method::Staged);
        assert_eq!(c.choose(shape(64 << 20, 8), true).0, Method::Device);
        // Estimates grow with size for every method.
        for m in Method::ALL {
            assert!(c.estimate_us(m, shape(1 << 20, 8)) < c.estimate_us(m, shape(1 << 24, 8)));
        }
        // Smaller blocks never pack faster.
        assert!(c.pack_us(shape(1 << 20, 1)) > c.pack_us(shape(1 << 20, 64)));
        assert_eq!(
            c.pack_us(shape(1 << 20, 64)),
            c.pack_us(shape(1 << 20, 4096))
        );
    }

    #[test]
    fn calibration_replaces_what_it_measured() {
        let base = Costs::default();
        let m = Measured {
            bytes: 4_000_000,
            tiny_pack_us: 5.0,
            pack_us: 9.0,
            mapped_us: 405.0,
            tiny_dma_us: 4.0,
            dma_us: 204.0,
        };
        let c = base.calibrated(m);
        assert_eq!(c.launch_us, 5.0);
        assert!((c.pack_gbps - 1000.0).abs() < 1e-9);
        assert!((c.mapped_gbps - 10.0).abs() < 1e-9);
        assert_eq!(c.dma_us, 4.0);
        assert!((c.dma_gbps - 20.0).abs() < 1e-9);
        assert_eq!(c.host_mpi_gbps, base.host_mpi_gbps);
        // A large transfer no slower than the tiny one tells nothing: the entry stays.
        let odd = base.calibrated(Measured {
            pack_us: 4.0,
            mapped_us: f64::NAN,
            ..m
        });
        assert_eq!(odd.pack_gbps, base.pack_gbps);
        assert_eq!(odd.mapped_gbps, base.mapped_gbps);
    }

    #[test]
    fn costs_from_the_environment_syntax() {
        let mut c = Costs::default();
        let bad = c.apply("mapped_gbps=3, dma_us = 2.5,,bogus=1,launch_us=x,dma_gbps=-1,nothing");
        assert_eq!(c.mapped_gbps, 3.0);
        assert_eq!(c.dma_us, 2.5);
        assert_eq!(bad, ["bogus=1", "launch_us=x", "dma_gbps=-1", "nothing"]);
        // Very slow mapped writes turn small messages to the staged way.
        let mut slow = Costs::default();
        slow.apply("mapped_gbps=0.01");
        assert_eq!(slow.choose(shape(1 << 16, 8), false).0, Method::Staged);
        assert!(describe(&c.choose(shape(8, 8), false).1).contains("one-shot"));
    }
}
