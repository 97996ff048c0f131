//! SVG plots of results: bandwidth and latency against size on log axes, one plot per collective
//! (or point-to-point test), one line per backend (and per variant, type and operation where a run
//! has several). `collbench plot results.json` redraws them from the JSON of any run.
//!
//! Out-of-place records only (in place is usually the same curve); records of size 0 (`barrier`)
//! have no place on a log axis and give no plot. Records without a bandwidth (`collbench overlap`'s)
//! are left out of the bandwidth plots; `overlap`'s records are drawn apart, as
//! `overlap-<collective>-latency.svg` (the pure communication time, one line per backend and
//! progress setting), since they are timed another way than the engine's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use plotters::prelude::*;

use crate::output::record::{Document, Record};

/// `collbench plot` flags.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// JSON results (`--json PATH` or `--format json` of any collbench run); several are drawn
    /// together.
    #[arg(required = true, value_name = "RESULTS.json")]
    pub files: Vec<PathBuf>,
    /// The folder the SVG files go into.
    #[arg(
        short = 'o',
        long = "output-dir",
        default_value = ".",
        value_name = "DIR"
    )]
    pub output_dir: PathBuf,
}

/// What a plot shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Bus bandwidth (GB/s) against size.
    Bandwidth,
    /// Time per call (us) against size.
    Latency,
}

impl Metric {
    /// The file name's suffix and the axis label.
    pub const fn describe(self) -> (&'static str, &'static str) {
        match self {
            Metric::Bandwidth => ("bandwidth", "bus bandwidth (GB/s)"),
            Metric::Latency => ("latency", "time per call (us)"),
        }
    }

    /// The record's value; `None` where it has none (no bandwidth in `overlap` records).
    fn value(self, r: &Record) -> Option<f64> {
        match self {
            Metric::Bandwidth => r.busbw_gbps,
            Metric::Latency => Some(r.time_us),
        }
    }
}

/// One line of a plot: its label and its points (size, value), sizes ascending.
pub type Series = (String, Vec<(f64, f64)>);

/// The lines of collective `collective`'s plot of `metric` from `records`: one per backend, and per
/// variant, type and operation where the records hold more than one of them.
pub fn series(records: &[&Record], metric: Metric) -> Vec<Series> {
    let several = |f: fn(&Record) -> String| {
        let mut v: Vec<String> = records.iter().map(|r| f(r)).collect();
        v.sort();
        v.dedup();
        v.len() > 1
    };
    let (variants, dtypes, ops, hosts) = (
        several(|r| r.variant.clone()),
        several(|r| r.dtype.clone()),
        several(|r| r.op.clone().unwrap_or_default()),
        several(|r| format!("{} {}", r.host, r.ranks)),
    );
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in records {
        let mut label = r.backend.clone();
        if variants {
            label.push_str(&format!(" {}", r.variant));
        }
        if dtypes {
            label.push_str(&format!(" {}", r.dtype));
        }
        if ops {
            label.push_str(&format!(" {}", r.op.as_deref().unwrap_or("-")));
        }
        if hosts {
            label.push_str(&format!(" ({}, {} ranks)", r.host, r.ranks));
        }
        if let Some(p) = &r.overlap.progress {
            label.push_str(&format!(" progress {p}"));
        }
        let Some(y) = metric.value(r) else { continue };
        if r.size_bytes > 0 && y > 0.0 && y.is_finite() {
            lines
                .entry(label)
                .or_default()
                .push((r.size_bytes as f64, y));
        }
    }
    lines
        .into_iter()
        .map(|(label, mut pts)| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (label, pts)
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect()
}

/// Draw `series` into the SVG file `path`, titled `title`, on log axes.
///
/// # Errors
/// Nothing to draw; the file cannot be written.
pub fn draw(path: &Path, title: &str, metric: Metric, series: &[Series]) -> anyhow::Result<()> {
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    anyhow::ensure!(x0 <= x1, "{title}: nothing to plot");
    // A single size or value still needs an axis of some length.
    let (x0, x1) = (x0 / 1.5, x1 * 1.5);
    let (y0, y1) = (y0 / 1.5, y1 * 1.5);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            // Size ticks at powers of 4 (8, 32, ..., 1K, 4K, ...), which `1K`-style labels name
            // exactly; decimal ticks would read 9.8K, 97.7K.
            (x0..x1).log_scale().base(4.0),
            (y0..y1).log_scale(),
        )
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("size (B)")
        .y_desc(metric.describe().1)
        .x_label_formatter(&|x| human_bytes(*x))
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, (label, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(match metric {
            Metric::Bandwidth => SeriesLabelPosition::UpperLeft,
            Metric::Latency => SeriesLabelPosition::UpperLeft,
        })
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// `1024` as `1K`, `3145728` as `3M`: powers of 1024, as `-b`/`-e` take them.
pub fn human_bytes(x: f64) -> String {
    let units = ["", "K", "M", "G", "T"];
    let mut v = x;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if (v - v.round()).abs() < 1e-9 {
        format!("{}{}", v.round(), units[u])
    } else {
        format!("{v:.1}{}", units[u])
    }
}

/// Draw every plot of `docs` into `dir`: `<collective>-bandwidth.svg` and `<collective>-latency.svg`
/// per collective with sized records. Returns the files written.
///
/// # Errors
/// The folder or a file cannot be written.
pub fn plot_all(docs: &[Document], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut by_collective: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for r in docs
        .iter()
        .flat_map(|d| &d.records)
        .filter(|r| r.placement != "in-place")
    {
        let key = if r.overlap == Default::default() {
            r.collective.clone()
        } else {
            format!("overlap-{}", r.collective)
        };
        by_collective.entry(key).or_default().push(r);
    }
    let mut written = Vec::new();
    for (collective, records) in by_collective {
        for metric in [Metric::Bandwidth, Metric::Latency] {
            let lines = series(&records, metric);
            if lines.is_empty() {
                continue;
            }
            let (suffix, what) = metric.describe();
            let path = dir.join(format!("{collective}-{suffix}.svg"));
            let ranks = records.first().map_or(0, |r| r.ranks);
            draw(
                &path,
                &format!("{collective}: {what}, {ranks} ranks"),
                metric,
                &lines,
            )?;
            written.push(path);
        }
    }
    Ok(written)
}

/// `collbench plot`: read the files, draw, name what was written.
///
/// # Errors
/// A file that cannot be read or is not collbench JSON; drawing errors.
pub fn run(args: &PlotArgs) -> anyhow::Result<()> {
    let docs = args
        .files
        .iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            Document::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let written = plot_all(&docs, &args.output_dir)?;
    if written.is_empty() {
        anyhow::bail!("no sized records to plot in {} file(s)", docs.len());
    }
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::record::tests::record;
    use crate::output::record::{Machine, SCHEMA};

    fn doc() -> Document {
        let mut records = Vec::new();
        for backend in ["mpi", "nccl"] {
            for (i, size) in [8u64, 1024, 65536].into_iter().enumerate() {
                let mut r = record();
                r.backend = backend.into();
                r.size_bytes = size;
                r.time_us = 1.0 + i as f64;
                r.busbw_gbps = Some(size as f64 / 1e3 / r.time_us);
                records.push(r);
                let mut ip = records.last().unwrap().clone();
                ip.placement = "in-place".into();
                records.push(ip);
            }
        }
        let mut barrier = record();
        barrier.collective = "barrier".into();
        barrier.size_bytes = 0;
        records.push(barrier);
        Document {
            schema: SCHEMA.into(),
            benchmark: "allreduce".into(),
            ranks: 2,
            machine: Machine::default(),
            backends: vec!["mpi".into(), "nccl".into()],
            settings: Default::default(),
            method: Vec::new(),
            notes: Vec::new(),
            environment: Vec::new(),
            records,
        }
    }

    #[test]
    fn one_line_per_backend() {
        let d = doc();
        let recs: Vec<&Record> = d
            .records
            .iter()
            .filter(|r| r.placement == "out-of-place" && r.collective == "allreduce")
            .collect();
        let s = series(&recs, Metric::Latency);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, "mpi");
        assert_eq!(s[1].1, [(8.0, 1.0), (1024.0, 2.0), (65536.0, 3.0)]);
        assert_eq!(human_bytes(1024.0), "1K");
        assert_eq!(human_bytes(8.0), "8");
        assert_eq!(human_bytes(1536.0), "1.5K");
    }

    #[test]
    fn records_without_bandwidth_give_a_latency_plot_of_their_own() {
        let dir = std::env::temp_dir().join(format!("collbench-plot-ov-{}", std::process::id()));
        let mut d = doc();
        for (i, size) in [1024u64, 2048].into_iter().enumerate() {
            let mut r = crate::output::record::tests::overlap_record();
            r.size_bytes = size;
            r.time_us = 5.0 + i as f64;
            d.records.push(r);
        }
        let recs: Vec<&Record> = d
            .records
            .iter()
            .filter(|r| r.benchmark == "overlap")
            .collect();
        assert!(series(&recs, Metric::Bandwidth).is_empty());
        let lat = series(&recs, Metric::Latency);
        assert_eq!(lat.len(), 1);
        assert_eq!(lat[0].0, "mpi progress on");
        let written = plot_all(&[d], &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "allreduce-bandwidth.svg",
                "allreduce-latency.svg",
                "overlap-allreduce-latency.svg"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plots_are_written_with_a_path_per_series() {
        let dir = std::env::temp_dir().join(format!("collbench-plot-{}", std::process::id()));
        let written = plot_all(&[doc()], &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        // The barrier's size-0 record gives no plot.
        assert_eq!(names, ["allreduce-bandwidth.svg", "allreduce-latency.svg"]);
        for p in &written {
            let svg = std::fs::read_to_string(p).unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            // One 2-pixel polyline per series, and one per legend entry (the mesh's lines are
            // 1 pixel wide).
            assert_eq!(
                svg.matches("stroke-width=\"2\" points=").count(),
                2 * 2,
                "{svg}"
            );
            assert!(svg.contains("\nmpi\n</text>") && svg.contains("\nnccl\n</text>"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(draw(Path::new("/nonexistent/x.svg"), "t", Metric::Latency, &[]).is_err());
    }
}
