//! `collbench pack`: GPU pack throughput of the generated kernels against copy baselines, and NVRTC
//! compile times, on one GPU (no MPI needed). The measurement itself is [`bench`](mod@bench).
//! `--format csv|json` writes the throughput rows as the records of every collbench run
//! ([`bench::Row::records`]), the device in the JSON document's `environment`.

pub mod bench;

use clap::Args;

use bench::Options;

use crate::output::record::Format;
use crate::output::record::{Document, Machine};
use crate::output::sink::Sink;

/// Flags of `collbench pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// Totals up to 1 MiB and the faces of a 128^3 grid, instead of 64 MiB (which allocates
    /// about 32 GiB of source) and 512^3.
    #[arg(long)]
    pub quick: bool,
    /// Also sweep launch configurations (threads per block x grid cap).
    #[arg(long)]
    pub sweep: bool,
    /// Only the compile times and the sweep, no throughput table.
    #[arg(long = "sweep-only")]
    pub sweep_only: bool,
    /// The CUDA device.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Output format: the Markdown tables, or the throughput rows as the records of every
    /// collbench run, as CSV or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

impl PackArgs {
    /// The benchmark's options.
    pub fn options(&self) -> Options {
        Options::default()
            .with_device(self.device)
            .with_quick(self.quick)
            .with_sweep(self.sweep || self.sweep_only)
            .with_table(!self.sweep_only)
    }
}

/// Run the benchmark, printing Markdown tables as the rows come.
///
/// # Errors
/// No CUDA driver or NVRTC, no such device, allocations or compiles that fail; output that cannot
/// be written.
pub fn run(args: &PackArgs) -> anyhow::Result<()> {
    let mut sink = Sink::open(
        0,
        None,
        args.format,
        Document::new("pack", 1, Machine::here()),
    )?;
    if !sink.table() {
        return records(args, sink);
    }
    sink.lines([
        "# collbench pack: one GPU; rows: contiguous 4 MiB, 2-D vectors at stride 512, the 6 \
         faces of a grid with radius 3 (fused); columns: ours, D2D copy (the ceiling), fetch64 \
         and fetch32 (references for small blocks: every 64-byte segment, or every 32-byte \
         sector, holding a byte of the layout read once, the packed bytes written; \
         ours/fetch32 holds ours against the traffic the layout needs), \
         cuMemcpy2DAsync, one copy per block, one thread per word"
            .to_string(),
    ]);
    bench::run(&args.options(), &mut |line| sink.lines([line.to_string()]))?;
    Ok(sink.finish(Vec::new)?)
}

/// The throughput rows as records, through `sink`.
fn records(args: &PackArgs, mut sink: Sink) -> anyhow::Result<()> {
    let options = args.options().with_sweep(false).with_table(true);
    let ctx = datatype_pack::gpu::context(options.device)?;
    let doc = sink.doc_mut();
    doc.environment = vec![bench::describe(&ctx)?];
    doc.backends = vec!["gpu".into()];
    doc.method = vec![
        "time: median per pack (ms x 1e3 = us) of back-to-back operations launched as one CUDA graph; algbw = packed bytes / time".into(),
    ];
    *doc = doc.clone().with_settings([
        ("quick", serde_json::json!(args.quick)),
        ("device", serde_json::json!(args.device)),
    ]);
    sink.begin(Vec::new);
    let mut b = bench::Bench::new(&options)?;
    b.table(&mut |r| sink.result(Vec::new, |machine, _| r.records(machine)))?;
    Ok(sink.finish(Vec::new)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: PackArgs,
    }

    #[test]
    fn flags() {
        let w = Wrap::try_parse_from(["x"]).unwrap();
        assert_eq!(w.args.options(), Options::default());
        let w = Wrap::try_parse_from(["x", "--quick", "--sweep-only", "--device", "1"]).unwrap();
        let o = w.args.options();
        assert!(o.quick && o.sweep && !o.table);
        assert_eq!(o.device, 1);
    }

    #[test]
    fn rows_become_records_that_round_trip() {
        let row = bench::Row {
            name: "face x".into(),
            packed: 1 << 20,
            word: 8,
            ours_ms: 0.01,
            d2d_ms: 0.005,
            copy2d_ms: None,
            per_block_ms: Some((1.0, true)),
            naive_ms: Some(0.02),
            fetch64_ms: None,
            fetch32_ms: None,
            extra: vec![("ours fused".into(), 0.008)],
        };
        let recs = row.records(&Machine::default());
        let v: Vec<&str> = recs.iter().map(|r| r.variant.as_str()).collect();
        assert_eq!(v, ["library", "d2d", "per-block", "naive", "ours fused"]);
        assert_eq!(recs[0].time_us, 10.0);
        assert_eq!(recs[0].algbw_gbps, Some(104.8576));
        assert_eq!(
            recs[2].config.as_deref(),
            Some("layout=face x;word=8;per_block=scaled")
        );
        let mut doc = Document::new("pack", 1, Machine::default());
        doc.records = recs;
        assert_eq!(Document::from_json(&doc.to_json()).unwrap(), doc);
        let w = Wrap::try_parse_from(["x", "--format", "json"]).unwrap();
        assert_eq!(w.args.format, Format::Json);
    }
}

#[cfg(test)]
mod pinned {
    //! The text of `collbench pack`'s throughput table, pinned byte for byte.
    use super::*;

    #[test]
    fn text_is_unchanged() {
        // The faces of a grid, with a fused variant of ours, a scaled per-block time and no
        // fetch bound; then a plain row with one.
        let (ours_ms, d2d_ms, naive_ms) = (0.01, 0.005, Some(0.02));
        let extra = vec![("ours fused".to_string(), 0.008)];
        let row = bench::Row {
            name: "face x".into(),
            packed: 1 << 20,
            word: 8,
            ours_ms,
            d2d_ms,
            copy2d_ms: None,
            per_block_ms: Some((1.0, true)),
            naive_ms,
            fetch64_ms: None,
            fetch32_ms: None,
            extra,
        };
        let plain = bench::Row {
            copy2d_ms: Some(0.0123),
            per_block_ms: Some((0.5, false)),
            naive_ms: None,
            fetch64_ms: Some(0.01),
            fetch32_ms: Some(0.008),
            extra: Vec::new(),
            ..row.clone()
        };
        let mut v: Vec<String> = bench::header().iter().map(|l| l.to_string()).collect();
        v.extend(row.lines());
        v.extend(plain.lines());
        crate::output::sink::tests::golden(&v, include_str!("../../tests/golden/pack.txt"));
    }
}
