//! `collbench allgatherv`: uneven all-gather on NCCL, one rank holding `--skew` times as much as each
//! other rank, comparing the library's algorithms (grouped send/recv, one broadcast per rank, and the
//! automatic choice between them) with padding every block to the largest and calling all-gather, the
//! usual workaround. Reports time, algorithm bandwidth and the device memory each needs: a table, or
//! with `--format csv|json` the records of `record.rs` (variants `p2p`, `bcast`, `auto`, `pad`; the
//! receive memory in `memory_bytes`, the skew in `config`).

use anyhow::Context;
use clap::Args;
use collectives_core::backend::nccl::UnevenAlgorithm;
use collectives_core::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};

use crate::measure::sizes::SizeArgs;
use crate::measure::timing;
use crate::output::record::Format;
use crate::output::record::{Document, Machine, Record};
use crate::output::sink::Sink;
// The records' CSV writer under the sink, which the tests drive directly.
#[cfg(test)]
use crate::output::record::Emitter;

/// Flags of `collbench allgatherv`.
#[derive(Debug, Args)]
#[command(
    mut_arg("min_bytes", |a| a.default_value("1K")),
    mut_arg("max_bytes", |a| a.default_value("256M")),
    mut_arg("step_factor", |a| a.default_value("4"))
)]
pub struct AllgathervArgs {
    /// Total sizes (bytes over all ranks): -b, -e, -f, -i.
    #[command(flatten)]
    pub sizes: SizeArgs,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Rank 0 holds this many times as many elements as each other rank.
    #[arg(long, default_value_t = 16)]
    pub skew: usize,
    /// Output format: the table, or the records of every collbench run as CSV or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// One total size's measurements (microseconds per call, the slowest rank's).
#[derive(Clone, Debug, PartialEq)]
pub struct AllgathervRow {
    /// Bytes gathered, over all ranks.
    pub bytes: usize,
    /// Grouped send/recv, one broadcast per rank, the library's choice, padding.
    pub us: [f64; 4],
    /// What the library's choice picked (`p2p` or `bcast`).
    pub auto_picks: &'static str,
    /// Receive memory per rank of the uneven call and of the padded one, bytes.
    pub memory: [usize; 2],
    /// Wrong elements of the library's choice over all ranks.
    pub wrong: u64,
}

impl AllgathervRow {
    /// The variants of a row, in [`AllgathervRow::us`] order.
    pub const VARIANTS: [&'static str; 4] = ["p2p", "bcast", "auto", "pad"];

    /// The row's records: one per variant, `size_bytes` the total, busbw factor `(n-1)/n`; the
    /// check (of `auto`'s output) on `auto`'s record.
    pub fn records(&self, machine: &Machine, nranks: usize, skew: usize) -> Vec<Record> {
        let factor = (nranks.saturating_sub(1)) as f64 / nranks.max(1) as f64;
        Self::VARIANTS
            .iter()
            .enumerate()
            .map(|(i, variant)| {
                let mut r = Record::new(machine, "allgatherv", "allgatherv", "nccl");
                r.variant = (*variant).into();
                r.placement = "out-of-place".into();
                r.dtype = "float".into();
                r.ranks = nranks;
                r.size_bytes = self.bytes as u64;
                r.count = (self.bytes / 4) as u64;
                r.memory_bytes = Some(self.memory[usize::from(i == 3)] as u64);
                r.config = Some(if i == 2 {
                    format!("skew={skew};picks={}", self.auto_picks)
                } else {
                    format!("skew={skew}")
                });
                r.wrong = (i == 2).then_some(self.wrong);
                r.timed(self.us[i], factor)
            })
            .collect()
    }
}

impl AllgathervRow {
    /// The row's table line.
    pub fn line(&self) -> String {
        let [p2p, bcast, auto, pad] = self.us;
        format!(
            " {:>12} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>9.2} {:>8} {:>12} {:>12} {:>6}",
            self.bytes,
            p2p,
            bcast,
            auto,
            pad,
            self.bytes as f64 / auto / 1e3,
            auto / pad,
            self.wrong,
            self.memory[0],
            self.memory[1],
            self.auto_picks
        )
    }
}

/// The table's `#` lines: the run on `nranks` ranks, what each column is, the column names.
pub fn preamble(nranks: usize, skew: usize, iters: usize, warmup: usize) -> Vec<String> {
    vec![
        format!("# collbench allgatherv: nranks {nranks}, backend nccl, rank 0 holds {skew}x each other rank; f32"),
        format!("#  time: max over ranks of the per-call time (CUDA events on the stream, -n {iters} after -w {warmup})"),
        format!("#  p2p: grouped send/recv; bcast: one broadcast per rank; auto: the library's choice (p2p up to {} ranks, else broadcasts from {} B in all)", UnevenAlgorithm::P2P_UP_TO_RANKS, UnevenAlgorithm::BROADCASTS_FROM),
        "#  pad: every block padded to the largest, then all_gather (needs nranks * largest block of receive memory)".to_string(),
        "#  memory: receive buffer bytes per rank; algbw = total size / time".to_string(),
        format!(
            "#{:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8} {:>12} {:>12} {:>6}",
            "total(B)",
            "p2p(us)",
            "bcast(us)",
            "auto(us)",
            "pad(us)",
            "auto GB/s",
            "auto/pad",
            "#wrong",
            "mem auto",
            "mem pad",
            "algo"
        ),
    ]
}

/// Run the comparison on every rank; rank 0 prints the table.
///
/// # Errors
/// Library errors (no GPU or NCCL, device memory), a wrong result.
pub fn run(universe: &mpi::environment::Universe, args: &AllgathervArgs) -> anyhow::Result<()> {
    let ctl = MpiComm::world(universe)?.with_checked(false);
    let mut comm = NcclComm::from_mpi(&ctl, None)
        .context("starting the nccl backend")?
        .with_checked(false);
    let (rank, size) = (comm.rank(), comm.size());
    let stream = comm.stream().clone();
    let weight = args.skew + size - 1;
    let mut machine = Machine::here();
    machine.nccl_version = collectives_core::nccl_sys::library()
        .ok()
        .map(|l| l.version().to_string());
    let mut sink = Sink::open(
        rank,
        None,
        args.format,
        Document::new("allgatherv", size, machine).with_settings([
            ("minbytes", serde_json::json!(args.sizes.min_bytes)),
            ("maxbytes", serde_json::json!(args.sizes.max_bytes)),
            ("stepfactor", serde_json::json!(args.sizes.step_factor)),
            ("iters", serde_json::json!(args.iters)),
            ("warmup_iters", serde_json::json!(args.warmup)),
            ("skew", serde_json::json!(args.skew)),
        ]),
    )?;
    sink.doc_mut().backends = vec!["nccl".into()];
    sink.doc_mut().method = vec![
        "time: max over ranks of the per-call time (CUDA events on the stream)".into(),
        "variants: p2p = grouped send/recv; bcast = one broadcast per rank; auto = the library's choice; pad = every block padded to the largest, then all_gather".into(),
        "memory_bytes: receive buffer bytes per rank; algbw = total size / time".into(),
    ];
    sink.begin(|| preamble(size, args.skew, args.iters, args.warmup));
    for total_bytes in args.sizes.sequence().map_err(anyhow::Error::msg)? {
        let small = (total_bytes / 4 / weight).max(1);
        let counts: Vec<usize> = (0..size)
            .map(|r| if r == 0 { small * args.skew } else { small })
            .collect();
        let total: usize = counts.iter().sum();
        let largest = small * args.skew;
        let value = |r: usize, i: usize| (r * 1_000_003 + i) as f32 % 16_777_216.0;
        let send = device::upload(
            &stream,
            &(0..counts[rank])
                .map(|i| value(rank, i))
                .collect::<Vec<f32>>(),
        )?;
        let mut recv = device::alloc_zeros::<f32>(&stream, total)?;
        let mut padded_send_host = vec![0.0f32; largest];
        padded_send_host[..counts[rank]].copy_from_slice(&device::download(&stream, &send)?);
        let padded_send = device::upload(&stream, &padded_send_host)?;
        let mut padded_recv = device::alloc_zeros::<f32>(&stream, largest * size)?;

        let mut times = [0.0f64; 3];
        for (slot, algo) in [
            UnevenAlgorithm::GroupedP2p,
            UnevenAlgorithm::Broadcasts,
            UnevenAlgorithm::Auto,
        ]
        .into_iter()
        .enumerate()
        {
            comm = comm.with_uneven_algorithm(algo);
            times[slot] = timing::events_us(&comm, &ctl, args.iters, args.warmup, || {
                Ok(comm.all_gather_v(&send, &mut recv, &counts)?)
            })?;
        }
        let expected: Vec<f32> = (0..size)
            .flat_map(|r| (0..counts[r]).map(move |i| value(r, i)))
            .collect();
        let got = device::download(&stream, &recv)?;
        let wrong_mine = got.iter().zip(&expected).filter(|(a, b)| a != b).count() as u64;
        let pad = timing::events_us(&comm, &ctl, args.iters, args.warmup, || {
            Ok(comm.all_gather(&padded_send, &mut padded_recv)?)
        })?;
        let mut wrong = [0u64];
        ctl.all_reduce(&[wrong_mine][..], &mut wrong[..], ReduceOp::Sum)?;
        let bytes = total * 4;
        if rank == 0 {
            let auto = times[2];
            let algo = match UnevenAlgorithm::Auto.choose(size, bytes) {
                UnevenAlgorithm::Broadcasts => "bcast",
                _ => "p2p",
            };
            let row = AllgathervRow {
                bytes,
                us: [times[0], times[1], auto, pad],
                auto_picks: algo,
                memory: [bytes, largest * size * 4],
                wrong: wrong[0],
            };
            sink.result(
                || vec![row.line()],
                |machine, nranks| row.records(machine, nranks, args.skew),
            );
        }
    }
    sink.finish(Vec::new)?;
    comm.finalize()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_records_that_round_trip() {
        let row = AllgathervRow {
            bytes: 4096,
            us: [10.0, 20.0, 10.0, 40.0],
            auto_picks: "p2p",
            memory: [4096, 16384],
            wrong: 0,
        };
        let recs = row.records(&Machine::default(), 4, 16);
        let v: Vec<&str> = recs.iter().map(|r| r.variant.as_str()).collect();
        assert_eq!(v, AllgathervRow::VARIANTS);
        assert_eq!(recs[3].memory_bytes, Some(16384));
        assert_eq!(recs[2].config.as_deref(), Some("skew=16;picks=p2p"));
        assert_eq!((recs[2].wrong, recs[0].wrong), (Some(0), None));
        assert_eq!(
            (recs[0].algbw_gbps, recs[0].busbw_gbps),
            (Some(0.4096), Some(0.3072))
        );
        let mut doc = Document::new("allgatherv", 4, Machine::default());
        doc.records = recs;
        assert_eq!(Document::from_json(&doc.to_json()).unwrap(), doc);
        let mut csv = Vec::new();
        let mut e = Emitter::new(
            Format::Csv,
            Document::new("allgatherv", 4, Machine::default()),
        );
        e.begin(&mut csv).unwrap();
        e.emit(&mut csv, row.records(&Machine::default(), 4, 16))
            .unwrap();
        e.finish(&mut csv).unwrap();
        let text = String::from_utf8(csv).unwrap();
        assert_eq!(text.lines().count(), 5);
        assert!(text.lines().nth(3).unwrap().contains("skew=16;picks=p2p"));
    }
}

#[cfg(test)]
mod pinned {
    //! The text of `collbench allgatherv`'s table, pinned byte for byte (as the run wrote it
    //! line by line before it went through the shared output layer).
    use super::*;

    #[test]
    fn text_is_unchanged() {
        let mut text = preamble(4, 16, 20, 5);
        text.push(
            AllgathervRow {
                bytes: 4096,
                us: [10.0, 20.125, 10.5, 40.0],
                auto_picks: "p2p",
                memory: [4096, 16384],
                wrong: 0,
            }
            .line(),
        );
        assert_eq!(
            crate::output::sink::tests::text_of(&text),
            include_str!("../../tests/golden/allgatherv.txt")
        );
    }
}
