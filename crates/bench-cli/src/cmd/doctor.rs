//! `collbench doctor`: what this machine and this MPI offer, and which backends will work here.
//!
//! Every rank looks at its own process (library, CUDA-awareness, GPUs, node-local rank); rank 0
//! gathers the answers and prints one report:
//! - the MPI library (`MPI_Get_library_version`) and the MPI standard it implements;
//! - whether the MPI takes device pointers, and how that was decided (the evidence and every fact
//!   looked at, see `collectives_core::cuda_aware`);
//! - the NCCL release and the file it was loaded from, or why it cannot be loaded; the CUDA driver;
//! - per rank: host, node-local rank, the GPUs it sees (count, names) and the GPU the device backends
//!   give it (the GPU of its node-local rank);
//! - per backend: whether it runs on every rank, or why not;
//! - the one-shot all-reduce of the NCCL backend (`collectives_core::one_shot`): up to which size
//!   it is chosen, or why it is not offered (ranks on several nodes, a pair of GPUs without peer
//!   access, two ranks on one GPU, the NCCL backend not running here, turned off);
//! - per node, the network ([`crate::cmd::network`]): the interfaces that are up, which ones NCCL and
//!   Open MPI's TCP transports would take, warnings for decoys (`docker*`, `veth*`, `virbr*`) and
//!   for more than one routable interface, the settings that pin them, and where nodes disagree;
//! - first of all, a launcher that does not belong to the linked MPI: rank 0 of 1 while the
//!   launcher's variables say it started more ([`crate::cmd::network::launcher_mismatch`]).
//!
//! It needs neither a GPU nor a CUDA-aware MPI: on a machine without either it says so.

use std::fmt::Write as _;

use collectives_core::backend::mpi_cuda::{cuda_unavailable, node_local};
use collectives_core::cuda_aware::{self, CudaAwareness};
use collectives_core::{Communicator, MpiComm, NcclComm, ReduceOp};

use crate::cmd::network::{self, NetView};
use crate::measure::backend::{self, Backend};

/// What one rank sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankInfo {
    /// Rank in the communicator.
    pub rank: usize,
    /// `MPI_Get_processor_name`.
    pub host: String,
    /// Index among the ranks of its node.
    pub local_rank: usize,
    /// Number of ranks on its node.
    pub local_size: usize,
    /// The names of the GPUs it sees, or why it sees none.
    pub gpus: Result<Vec<String>, String>,
    /// Its CUDA-awareness verdict, in short (`yes`, `no`, `unknown`).
    pub cuda_aware: String,
    /// `CUDA_VISIBLE_DEVICES`, when set.
    pub visible_devices: Option<String>,
}

impl RankInfo {
    /// The GPU the device backends give this rank: that of its node-local rank (round robin when a node
    /// has more ranks than GPUs; NCCL then refuses, as two ranks would share a GPU).
    pub fn device(&self) -> Option<usize> {
        match &self.gpus {
            Ok(g) if !g.is_empty() => Some(self.local_rank % g.len()),
            _ => None,
        }
    }

    /// One line of fields separated by tabs, for the trip to rank 0.
    fn encode(&self) -> String {
        let (status, gpus) = match &self.gpus {
            Ok(g) => ("ok", g.join(";")),
            Err(why) => ("err", why.clone()),
        };
        [
            self.rank.to_string(),
            self.host.clone(),
            self.local_rank.to_string(),
            self.local_size.to_string(),
            status.to_string(),
            gpus,
            self.cuda_aware.clone(),
            self.visible_devices.clone().unwrap_or_default(),
        ]
        .iter()
        .map(|f| f.replace(['\n', '\r', '\t'], " "))
        .collect::<Vec<_>>()
        .join("\t")
    }

    fn decode(line: &str) -> Option<RankInfo> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 8 {
            return None;
        }
        let gpus = match f[4] {
            "ok" if f[5].is_empty() => Ok(Vec::new()),
            "ok" => Ok(f[5].split(';').map(str::to_string).collect()),
            _ => Err(f[5].to_string()),
        };
        Some(RankInfo {
            rank: f[0].parse().ok()?,
            host: f[1].to_string(),
            local_rank: f[2].parse().ok()?,
            local_size: f[3].parse().ok()?,
            gpus,
            cuda_aware: f[6].to_string(),
            visible_devices: (!f[7].is_empty()).then(|| f[7].to_string()),
        })
    }
}

/// The whole report, as rank 0 has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Number of ranks.
    pub nranks: usize,
    /// `MPI_Get_library_version` (lines joined by `; `).
    pub library: String,
    /// `MPI_Get_version`.
    pub standard: Option<(i32, i32)>,
    /// Rank 0's CUDA-awareness verdict with its evidence.
    pub cuda_aware: CudaAwareness,
    /// The facts the verdict was decided from.
    pub facts: Vec<String>,
    /// Whether every rank reached the same verdict.
    pub cuda_aware_everywhere_same: bool,
    /// The NCCL release and path, or why it cannot be loaded.
    pub nccl: Result<String, String>,
    /// The CUDA driver's version, or why there is none.
    pub cuda_driver: Result<String, String>,
    /// Every rank's view, in rank order.
    pub ranks: Vec<RankInfo>,
    /// Every backend and why it will not run here (`None`: it runs on every rank).
    pub backends: Vec<(Backend, Option<String>)>,
    /// The largest NCCL all-reduce, in bytes, that takes the one-shot path, or why the path is not
    /// offered on these ranks.
    pub one_shot: Result<usize, String>,
    /// Every rank's view of its node's network, in rank order.
    pub network: Vec<NetView>,
    /// The launcher mistake, when every process is rank 0 of 1 under a launcher that started more.
    pub launcher: Option<String>,
}

fn short(a: &CudaAwareness) -> &'static str {
    match a {
        CudaAwareness::Yes { .. } => "yes",
        CudaAwareness::No { .. } => "no",
        _ => "unknown",
    }
}

fn processor_name() -> String {
    // MPI_MAX_PROCESSOR_NAME is 256 in Open MPI and 128 in MPICH.
    let mut buf = vec![0u8; 1024];
    let mut len: std::ffi::c_int = 0;
    // SAFETY: `buf` has room for MPI_MAX_PROCESSOR_NAME characters of the MPIs we know; `len` is a
    // valid out-pointer; MPI is running (a communicator exists).
    let rc = unsafe { mpi::ffi::MPI_Get_processor_name(buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let n = (len.max(0) as usize).min(buf.len());
    let end = buf[..n].iter().position(|&b| b == 0).unwrap_or(n);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The names of the GPUs this process sees (no context is created), or why it sees none.
pub fn gpu_names() -> Result<Vec<String>, String> {
    use collectives_core::cudarc::driver::result;
    if let Some(why) = cuda_unavailable() {
        // "no device" is an empty list, not an error.
        return if why.contains("sees no device") {
            Ok(Vec::new())
        } else {
            Err(why)
        };
    }
    result::init().map_err(|e| e.to_string())?;
    let n = result::device::get_count().map_err(|e| e.to_string())?;
    (0..n)
        .map(|i| {
            let dev = result::device::get(i).map_err(|e| e.to_string())?;
            result::device::get_name(dev).map_err(|e| e.to_string())
        })
        .collect()
}

/// The CUDA driver's version (`cuDriverGetVersion`), or why there is none.
pub fn cuda_driver_version() -> Result<String, String> {
    if !collectives_core::backend::nccl::cuda_driver_present() {
        return Err("no CUDA driver (libcuda could not be opened)".to_string());
    }
    let mut v: std::ffi::c_int = 0;
    // SAFETY: libcuda is present (checked above, so cudarc's loader does not panic); `v` is a valid
    // out-pointer; cuDriverGetVersion may be called before cuInit.
    let rc = unsafe { collectives_core::cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    if rc != collectives_core::cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuDriverGetVersion failed: {rc:?}"));
    }
    Ok(format!("{}.{} ({v})", v / 1000, (v % 1000) / 10))
}

/// The NCCL release and the file it came from, or why it cannot be loaded.
pub fn nccl_summary() -> Result<String, String> {
    collectives_core::nccl_sys::library()
        .map(|lib| format!("NCCL {} ({})", lib.version(), lib.path().display()))
        .map_err(|e| e.to_string())
}

/// This rank's view of the machine. Collective over `world` (the node-local split).
///
/// # Errors
/// MPI errors of the split; detection needs MPI running.
pub fn local_info(world: &MpiComm) -> anyhow::Result<RankInfo> {
    let (local_rank, local_size) = node_local(world)?;
    let detection = cuda_aware::detect()?;
    Ok(RankInfo {
        rank: world.rank(),
        host: processor_name(),
        local_rank,
        local_size,
        gpus: gpu_names(),
        cuda_aware: short(&detection.awareness).to_string(),
        visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
    })
}

/// Gather every rank's line on rank 0 (`None` elsewhere). Collective over `ctl`.
fn gather_lines(ctl: &MpiComm, line: &str) -> anyhow::Result<Option<Vec<String>>> {
    let bytes = line.as_bytes();
    let mut lens = vec![0u64; ctl.size()];
    ctl.all_gather(&[bytes.len() as u64][..], &mut lens[..])?;
    let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
    let total: usize = counts.iter().sum();
    if ctl.rank() == 0 {
        let mut all = vec![0u8; total];
        ctl.gather_v(bytes, Some(&mut all[..]), &counts, 0)?;
        let mut out = Vec::with_capacity(counts.len());
        let mut at = 0;
        for c in counts {
            out.push(String::from_utf8_lossy(&all[at..at + c]).into_owned());
            at += c;
        }
        Ok(Some(out))
    } else {
        ctl.gather_v(bytes, None, &counts, 0)?;
        Ok(None)
    }
}

/// Why each backend cannot run, agreed over all ranks ([`backend::agreed_unavailable`]). Collective.
///
/// # Errors
/// MPI errors of the agreement.
pub fn backends_here(ctl: &MpiComm) -> anyhow::Result<Vec<(Backend, Option<String>)>> {
    let local: Vec<Option<String>> = Backend::ALL.iter().map(|b| b.unavailable()).collect();
    let mut everywhere: Vec<i32> = local.iter().map(|r| i32::from(r.is_none())).collect();
    ctl.all_reduce_in_place(&mut everywhere[..], ReduceOp::Min)?;
    Ok(Backend::ALL
        .into_iter()
        .zip(local)
        .zip(everywhere)
        .map(|((b, why), all)| (b, backend::agreed_unavailable(why, all == 1)))
        .collect())
}

/// The one-shot path of an NCCL communicator over `ctl`'s ranks: its byte limit, or why it is not
/// offered. Collective; every rank takes the same branch (`backends` is agreed, and whether the
/// ranks share one node is the same answer everywhere). Ranks on several nodes are answered
/// without making a communicator: the path is never offered there, and NCCL's start across
/// nodes is what the doctor may be run to diagnose.
///
/// # Errors
/// The library's errors freeing the communicator.
fn one_shot_here(
    ctl: &MpiComm,
    info: &RankInfo,
    backends: &[(Backend, Option<String>)],
) -> anyhow::Result<Result<usize, String>> {
    let nccl = backends.iter().find(|(b, _)| *b == Backend::Nccl);
    if let Some((_, Some(why))) = nccl {
        return Ok(Err(format!("the nccl backend does not run here: {why}")));
    }
    if info.local_size != ctl.size() {
        return Ok(Err("the ranks span nodes".to_owned()));
    }
    let comm = match NcclComm::from_mpi(ctl, None) {
        Ok(c) => c.with_checked(false),
        Err(e) => return Ok(Err(format!("no NCCL communicator could be made: {e}"))),
    };
    let answer = match comm.one_shot_refusal() {
        Some(why) => Err(why.to_owned()),
        None => Ok(comm.one_shot_max_bytes()),
    };
    comm.finalize()?;
    Ok(answer)
}

/// Run the doctor over the ranks of `world`: every rank looks, rank 0 gets the [`Report`] (`None`
/// elsewhere). Collective; needs no GPU.
///
/// # Errors
/// MPI errors; a rank's answer that does not parse.
pub fn doctor(world: &MpiComm) -> anyhow::Result<Option<Report>> {
    let ctl = world.dup()?.with_checked(false);
    let info = local_info(&ctl)?;
    let detection = cuda_aware::detect()?;
    let code = match &detection.awareness {
        CudaAwareness::Yes { .. } => 1i32,
        CudaAwareness::No { .. } => 0,
        _ => -1,
    };
    let mut ext = [code, -code];
    ctl.all_reduce_in_place(&mut ext[..], ReduceOp::Max)?;
    let same = ext[0] == -ext[1];
    let backends = backends_here(&ctl)?;
    let one_shot = one_shot_here(&ctl, &info, &backends)?;
    let lines = gather_lines(&ctl, &info.encode())?;
    let net = serde_json::to_string(&network::local_view(&info.host))?;
    let nets = gather_lines(&ctl, &net)?;
    let (Some(lines), Some(nets)) = (lines, nets) else {
        return Ok(None);
    };
    let network = nets
        .iter()
        .map(|l| serde_json::from_str::<NetView>(l))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("a rank's network view does not parse: {e}"))?;
    let ranks = lines
        .iter()
        .map(|l| {
            RankInfo::decode(l)
                .ok_or_else(|| anyhow::anyhow!("a rank's answer does not parse: {l:?}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let library = detection
        .facts
        .library
        .clone()
        .unwrap_or_else(|| "unknown (MPI_Get_library_version failed)".to_string());
    let launcher = network::launcher_mismatch(ctl.size(), &library, &|k| std::env::var(k).ok());
    Ok(Some(Report {
        nranks: ctl.size(),
        library,
        standard: detection.facts.standard,
        cuda_aware: detection.awareness.clone(),
        facts: detection.facts.lines(),
        cuda_aware_everywhere_same: same,
        nccl: nccl_summary(),
        cuda_driver: cuda_driver_version(),
        ranks,
        backends,
        one_shot,
        network,
        launcher,
    }))
}

impl Report {
    /// The report as text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let either = |r: &Result<String, String>| match r {
            Ok(v) => v.clone(),
            Err(why) => format!("not available: {why}"),
        };
        let _ = writeln!(s, "# collbench doctor: {} rank(s)", self.nranks);
        if let Some(mistake) = &self.launcher {
            let _ = writeln!(s, "LAUNCHER MISTAKE : {mistake}");
        }
        let _ = writeln!(s, "MPI library      : {}", self.library);
        if let Some((major, minor)) = self.standard {
            let _ = writeln!(s, "MPI standard     : {major}.{minor}");
        }
        let _ = writeln!(s, "CUDA-aware MPI   : {}", self.cuda_aware);
        let _ = writeln!(
            s,
            "  decided from   : the first of: Open MPI's MPIX_Query_cuda_support, MPICH's \
             MPIX_GPU_query_support, MPI 4.1 memory kinds, environment hints of the MPI named above"
        );
        for f in &self.facts {
            let _ = writeln!(s, "  {f}");
        }
        if !self.cuda_aware_everywhere_same {
            let _ = writeln!(
                s,
                "  WARNING: ranks reached different verdicts (see the table)"
            );
        }
        let _ = writeln!(s, "NCCL             : {}", either(&self.nccl));
        let _ = writeln!(s, "CUDA driver      : {}", either(&self.cuda_driver));
        let _ = writeln!(s, "ranks:");
        let _ = writeln!(
            s,
            "  {:>4}  {:<20} {:>5}  {:>4}  {:<6}  {:<10}  gpus seen",
            "rank", "host", "local", "gpu", "aware", "visible"
        );
        for r in &self.ranks {
            let gpus = match &r.gpus {
                Ok(g) if g.is_empty() => "none".to_string(),
                Ok(g) => format!("{}: {}", g.len(), g.join(", ")),
                Err(why) => format!("none ({why})"),
            };
            let device = r
                .device()
                .map_or_else(|| "-".to_string(), |d| d.to_string());
            let _ = writeln!(
                s,
                "  {:>4}  {:<20} {:>5}  {:>4}  {:<6}  {:<10}  {gpus}",
                r.rank,
                r.host,
                format!("{}/{}", r.local_rank, r.local_size),
                device,
                r.cuda_aware,
                r.visible_devices.as_deref().unwrap_or("-"),
            );
        }
        let _ = writeln!(
            s,
            "  (gpu: the device backends' GPU for the rank, that of its node-local rank)"
        );
        let _ = writeln!(s, "backends:");
        for (b, why) in &self.backends {
            match why {
                None => {
                    let _ = writeln!(s, "  {:<11} yes", b.name());
                }
                Some(why) => {
                    let _ = writeln!(s, "  {:<11} no: {why}", b.name());
                }
            }
        }
        match &self.one_shot {
            Ok(limit) => {
                let _ = writeln!(
                    s,
                    "one-shot all-reduce (nccl): chosen up to {limit} bytes \
                     (COLLECTIVES_ONE_SHOT_MAX_BYTES)"
                );
            }
            Err(why) => {
                let _ = writeln!(s, "one-shot all-reduce (nccl): not offered: {why}");
            }
        }
        if !self.network.is_empty() {
            s.push_str(&network::render(&self.network));
        }
        s
    }

    /// Whether `backend` runs on every rank.
    pub fn works(&self, backend: Backend) -> bool {
        self.backends
            .iter()
            .any(|(b, why)| *b == backend && why.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collectives_core::cuda_aware::Evidence;

    fn info(gpus: Result<Vec<String>, String>) -> RankInfo {
        RankInfo {
            rank: 3,
            host: "node-7".into(),
            local_rank: 1,
            local_size: 2,
            gpus,
            cuda_aware: "no".into(),
            visible_devices: Some("0,1".into()),
        }
    }

    #[test]
    fn rank_lines_round_trip() {
        for gpus in [
            Ok(vec!["NVIDIA H200".to_string(), "NVIDIA H200".to_string()]),
            Ok(Vec::new()),
            Err("no CUDA driver (libcuda could not be opened)".to_string()),
        ] {
            let i = info(gpus);
            assert_eq!(RankInfo::decode(&i.encode()), Some(i.clone()));
        }
        let mut i = info(Ok(vec!["A".into()]));
        i.visible_devices = None;
        i.host = "with\ttab".into();
        let back = RankInfo::decode(&i.encode()).unwrap();
        assert_eq!((back.rank, back.host.as_str()), (3, "with tab"));
        assert_eq!(back.visible_devices, None);
        assert_eq!(RankInfo::decode("garbage"), None);
    }

    #[test]
    fn device_is_the_node_local_rank_round_robin() {
        assert_eq!(info(Ok(vec!["a".into(), "b".into()])).device(), Some(1));
        assert_eq!(info(Ok(vec!["a".into()])).device(), Some(0));
        assert_eq!(info(Ok(Vec::new())).device(), None);
        assert_eq!(info(Err("x".into())).device(), None);
    }

    #[test]
    fn the_report_says_what_works_and_why() {
        let r = Report {
            nranks: 2,
            library: "Open MPI v4.1.4".into(),
            standard: Some((3, 1)),
            cuda_aware: CudaAwareness::No {
                reason: Evidence::OmpiQuery(0),
            },
            facts: vec!["MPIX_Query_cuda_support(): 0".into()],
            cuda_aware_everywhere_same: true,
            nccl: Err("libnccl.so.2: not found".into()),
            cuda_driver: Err("no CUDA driver".into()),
            ranks: vec![info(Err("no CUDA driver".into()))],
            backends: vec![
                (Backend::Mpi, None),
                (Backend::CudaMpi, Some("no CUDA driver".into())),
            ],
            one_shot: Err("the nccl backend does not run here: no CUDA driver".into()),
            network: vec![],
            launcher: Some("this process is rank 0 of 1, but srun started 4".into()),
        };
        let text = r.render();
        assert!(text.contains("MPI library      : Open MPI v4.1.4"));
        assert!(text
            .contains("CUDA-aware MPI   : no (Open MPI's MPIX_Query_cuda_support() returned 0)"));
        assert!(text.contains("MPIX_Query_cuda_support(): 0"));
        assert!(text.contains("NCCL             : not available: libnccl.so.2"));
        assert!(text.contains("node-7"));
        assert!(text.contains("  mpi         yes"));
        assert!(text.contains("  cuda-mpi    no: no CUDA driver"));
        assert!(r.works(Backend::Mpi) && !r.works(Backend::CudaMpi) && !r.works(Backend::Nccl));
        assert!(text.contains("LAUNCHER MISTAKE : this process is rank 0 of 1, but srun started 4"));
        assert!(!text.contains("network (per node"));
        assert!(text.contains(
            "one-shot all-reduce (nccl): not offered: the nccl backend does not run here: no CUDA \
             driver"
        ));
        let offered = Report {
            one_shot: Ok(32768),
            ..r
        };
        assert!(offered
            .render()
            .contains("one-shot all-reduce (nccl): chosen up to 32768 bytes"));
    }

    #[test]
    fn probes_answer_without_a_gpu_or_panic() {
        let _ = gpu_names();
        let _ = cuda_driver_version();
        let _ = nccl_summary();
    }
}
