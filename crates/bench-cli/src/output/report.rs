//! Output of the collective benchmarks: an aligned table in the manner of nccl-tests, OSU's tables
//! ([`crate::output::osu`]), or the records of [`crate::output::record`] as CSV or JSON.
//!
//! Table, OSU and CSV lines are written as each size finishes; JSON is written as one document at the
//! end. CSV and JSON carry every field (min and max over ranks, per-iteration statistics); the table
//! shows those with `--minmax`. Notes (backends or combinations left out) are `#` lines in the table,
//! an array in JSON, and lines on standard error with CSV, so that standard output stays plain CSV.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::output::progress::Progress;
use crate::output::record::{
    fmt_time_us, rounded, Document, Format, IterStats, Machine, Placement, Record, Row, SCHEMA,
};

/// Which optional columns a run has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// Min and max over ranks in the table (always in CSV and JSON); OSU's `-f` columns.
    pub minmax: bool,
    /// Per-iteration statistics (min, p50, p99 of the slowest rank's time per iteration): in CSV and
    /// JSON, and in the table with `minmax`.
    pub iter_stats: bool,
    /// Several variants of the call are timed (`--baseline raw`, `--checked-cost`): the table has a
    /// `variant` column and a closing comparison.
    pub variants: bool,
}

/// The run's settings, printed in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// Benchmark name: the collective (`allreduce`).
    pub benchmark: &'static str,
    /// Number of ranks.
    pub nranks: usize,
    /// Backends that run.
    pub backends: Vec<&'static str>,
    /// Checked mode of the measured communicator.
    pub checked: bool,
    /// `-b`.
    pub min_bytes: usize,
    /// `-e`.
    pub max_bytes: usize,
    /// The step, as [`crate::measure::sizes::Step::describe`] writes it.
    pub step: String,
    /// `-w`.
    pub warmup_iters: usize,
    /// `-n`.
    pub iters: usize,
    /// `-c`.
    pub check: bool,
    /// Things left out, and why.
    pub notes: Vec<String>,
    /// What the run ran on (library versions, devices), added as backends start
    /// ([`Reporter::environment`]).
    pub environment: Vec<String>,
    /// The machine and libraries, carried by every record.
    pub machine: Machine,
}

const US: f64 = 1e6;

/// The records of `row`: its out-of-place placement and, where the collective has one, its in-place
/// one.
pub fn records(row: &Row, meta: &Meta) -> Vec<Record> {
    let placements: &[(&str, &Placement)] = if row.in_place {
        &[("out-of-place", &row.oop), ("in-place", &row.ip)]
    } else {
        &[("out-of-place", &row.oop)]
    };
    placements
        .iter()
        .map(|(placement, p)| Record {
            host: meta.machine.host.clone(),
            cores: meta.machine.cores,
            mpi_library: meta.machine.mpi_library.clone(),
            nccl_version: meta.machine.nccl_version.clone(),
            benchmark: meta.benchmark.to_string(),
            collective: meta.benchmark.to_string(),
            backend: row.backend.to_string(),
            variant: row.variant.to_string(),
            placement: placement.to_string(),
            dtype: row.dtype.to_string(),
            op: (row.redop != "none").then(|| row.redop.to_string()),
            root: usize::try_from(row.root).ok(),
            ranks: meta.nranks,
            size_bytes: row.size as u64,
            count: row.count as u64,
            time_us: rounded(p.time.avg * US, 3),
            time_min_us: rounded(p.time.min * US, 3),
            time_max_us: rounded(p.time.max * US, 3),
            iterations: meta.iters as u64,
            algbw_gbps: Some(rounded(p.algbw, 4)),
            busbw_gbps: Some(rounded(p.busbw, 4)),
            wrong: p.wrong,
            iter_min_us: p.iter.map(|i| rounded(i.min * US, 3)),
            iter_p50_us: p.iter.map(|i| rounded(i.p50 * US, 3)),
            iter_p99_us: p.iter.map(|i| rounded(i.p99 * US, 3)),
            messages_per_s: None,
            ..Record::default()
        })
        .collect()
}

/// The JSON document of a run: its settings and `records`.
pub fn document(meta: &Meta, records: Vec<Record>) -> Document {
    let settings = [
        ("minbytes", serde_json::json!(meta.min_bytes)),
        ("maxbytes", serde_json::json!(meta.max_bytes)),
        ("step", serde_json::json!(meta.step)),
        ("warmup_iters", serde_json::json!(meta.warmup_iters)),
        ("iters", serde_json::json!(meta.iters)),
        ("check", serde_json::json!(meta.check)),
        ("checked", serde_json::json!(meta.checked)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Document {
        schema: SCHEMA.to_string(),
        benchmark: meta.benchmark.to_string(),
        ranks: meta.nranks,
        machine: meta.machine.clone(),
        backends: meta.backends.iter().map(|b| b.to_string()).collect(),
        settings,
        method: vec![
            format!("time: {TIME_NOTE}"),
            format!(
                "busbw = algbw * {} (nccl-tests' PERFORMANCE.md)",
                busbw_factor_text(meta.benchmark)
            ),
            format!("variants: {VARIANTS_NOTE}"),
        ],
        notes: meta.notes.clone(),
        environment: meta.environment.clone(),
        records,
    }
}

/// How times are taken.
pub const TIME_NOTE: &str =
    "per call: each rank times -n calls after -w warm-up calls and a barrier \
     (wall clock for mpi; CUDA events on the communicator's stream for nccl) and divides by -n, \
     then the average (min, max) is taken over ranks";
/// The all-reduce bus-bandwidth factor.
pub const BUSBW_FACTOR: &str = "2(n-1)/n";

/// The bus-bandwidth factor of collective `name`, as text (the table of [`crate::cmd::coll`]):
/// `2(n-1)/n` for all-reduce (and any other benchmark), `1` where the whole buffer crosses each link
/// once, `0` for the barrier, `(n-1)/n` for the collectives that move blocks.
pub fn busbw_factor_text(name: &str) -> &'static str {
    match name {
        "broadcast" | "reduce" | "sendrecv" => "1",
        "barrier" => "0",
        "allgather" | "allgatherv" | "reducescatter" | "alltoall" | "alltoallv" | "gather"
        | "gatherv" | "scatter" | "scatterv" => "(n-1)/n",
        _ => BUSBW_FACTOR,
    }
}

/// What the variants of a call are.
pub const VARIANTS_NOTE: &str = "library: the library's call; raw: the backend's own all-reduce \
     (MPI_Allreduce through mpi::ffi, ncclAllReduce through nccl_sys) on the same communicator \
     handle, stream and buffers; checked: the library's call on a second communicator with checked \
     mode on; persistent: the library's persistent plan (*_init once per size, start + wait per \
     call; its path is noted); the variants run one after the other at each size";

/// The `#` header lines of the table, before the column names.
pub fn table_preamble(meta: &Meta, cols: Columns) -> Vec<String> {
    let mut v = vec![
        format!(
            "# collbench {}: nranks {}, backend {}, checked {}",
            meta.benchmark,
            meta.nranks,
            meta.backends.join(","),
            if meta.checked { "on" } else { "off" }
        ),
        "#".to_string(),
        format!(
            "#  minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} validation: {}",
            meta.min_bytes,
            meta.max_bytes,
            meta.step,
            meta.warmup_iters,
            meta.iters,
            u8::from(meta.check)
        ),
        format!("#  time: {TIME_NOTE}"),
        format!(
            "#  algbw = size / time; busbw = algbw * {} for {} (bus bandwidth, as in nccl-tests' \
             PERFORMANCE.md; 1 GB = 1e9 bytes)",
            busbw_factor_text(meta.benchmark),
            meta.benchmark,
        ),
    ];
    if cols.variants {
        v.push(format!("#  variants: {VARIANTS_NOTE}"));
    }
    for n in &meta.notes {
        v.push(format!("#  note: {n}"));
    }
    v.push("#".to_string());
    v
}

struct Col {
    /// 0: key columns, 1: out-of-place, 2: in-place.
    group: usize,
    name: &'static str,
    unit: &'static str,
    width: usize,
}

fn table_columns(cols: Columns) -> Vec<Col> {
    let c = |group, name, unit, width| Col {
        group,
        name,
        unit,
        width,
    };
    let mut v = vec![
        c(0, "size", "(B)", 12),
        c(0, "count", "(elements)", 12),
        c(0, "type", "", 10),
        c(0, "redop", "", 6),
        c(0, "root", "", 5),
    ];
    if cols.variants {
        v.push(c(0, "variant", "", 8));
    }
    for g in [1, 2] {
        v.push(c(g, "time", "(us)", 9));
        if cols.minmax {
            v.push(c(g, "min", "(us)", 9));
            v.push(c(g, "max", "(us)", 9));
        }
        if cols.iter_stats {
            v.push(c(g, "it-min", "(us)", 9));
            v.push(c(g, "p50", "(us)", 9));
            v.push(c(g, "p99", "(us)", 9));
        }
        v.push(c(g, "algbw", "(GB/s)", 8));
        v.push(c(g, "busbw", "(GB/s)", 8));
        v.push(c(g, "#wrong", "", 6));
    }
    v
}

/// `cells` right-aligned in `widths`, after `first` (`#` for a header line, a space for a row),
/// without trailing spaces.
pub fn line(first: char, cells: &[String], widths: &[usize]) -> String {
    let mut s = String::new();
    s.push(first);
    for (cell, w) in cells.iter().zip(widths) {
        s.push(' ');
        s.push_str(&format!("{cell:>w$}"));
    }
    s.trim_end().to_string()
}

/// The three `#` lines naming the table's columns (group, name, unit).
pub fn table_header(cols: Columns) -> Vec<String> {
    let columns = table_columns(cols);
    let widths: Vec<usize> = columns.iter().map(|c| c.width).collect();
    let names: Vec<String> = columns.iter().map(|c| c.name.to_string()).collect();
    let units: Vec<String> = columns.iter().map(|c| c.unit.to_string()).collect();
    // The group line: each group's label centred over its columns.
    let mut group = vec![' '; 1 + widths.iter().map(|w| w + 1).sum::<usize>()];
    group[0] = '#';
    for (g, label) in [(1, "out-of-place"), (2, "in-place")] {
        let mut start = 1;
        let mut span = 0;
        for c in &columns {
            if c.group < g {
                start += c.width + 1;
            } else if c.group == g {
                span += c.width + 1;
            }
        }
        let at = start + span.saturating_sub(label.len()) / 2;
        for (k, ch) in label.chars().enumerate() {
            if let Some(slot) = group.get_mut(at + k) {
                *slot = ch;
            }
        }
    }
    vec![
        group.into_iter().collect::<String>().trim_end().to_string(),
        line('#', &names, &widths),
        line('#', &units, &widths),
    ]
}

fn placement_cells(m: &Placement, cols: Columns) -> Vec<String> {
    let mut v = vec![fmt_time_us(m.time.avg * US)];
    if cols.minmax {
        v.push(fmt_time_us(m.time.min * US));
        v.push(fmt_time_us(m.time.max * US));
    }
    if cols.iter_stats {
        let it =
            |f: fn(&IterStats) -> f64| m.iter.map_or("-".to_string(), |i| fmt_time_us(f(&i) * US));
        v.push(it(|i| i.min));
        v.push(it(|i| i.p50));
        v.push(it(|i| i.p99));
    }
    v.push(format!("{:.2}", m.algbw));
    v.push(format!("{:.2}", m.busbw));
    v.push(m.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string()));
    v
}

/// `row` as an aligned table line.
pub fn table_row(row: &Row, cols: Columns) -> String {
    let widths: Vec<usize> = table_columns(cols).iter().map(|c| c.width).collect();
    let mut cells = vec![
        row.size.to_string(),
        row.count.to_string(),
        row.dtype.to_string(),
        row.redop.to_string(),
        row.root.to_string(),
    ];
    if cols.variants {
        cells.push(row.variant.to_string());
    }
    cells.extend(placement_cells(&row.oop, cols));
    let ip = placement_cells(&row.ip, cols);
    if row.in_place {
        cells.extend(ip);
    } else {
        cells.extend(ip.iter().map(|_| "N/A".to_string()));
    }
    line(' ', &cells, &widths)
}

/// Writes a run's output on rank 0; on other ranks it has no writer and writes nothing.
///
/// Writing never interrupts the run (every rank must keep making the same calls): the first write error
/// stops the output and is returned by [`finish`](Self::finish).
#[derive(Debug)]
pub struct Reporter<W: Write> {
    out: Option<W>,
    error: Option<io::Error>,
    format: Format,
    cols: Columns,
    meta: Meta,
    rows: Vec<Row>,
    json_path: Option<PathBuf>,
    progress: Option<Progress>,
    /// The OSU table the last row went into: backend, variant, type and operation.
    osu_table: Option<(&'static str, &'static str, &'static str, &'static str)>,
    /// OSU's tables: rows of variants after the first, held back so that each variant's rows form
    /// one table (written at the next section and at the end).
    osu_held: Vec<Row>,
    /// OSU's tables: `#` lines of [`environment_once`](Reporter::environment_once), written with
    /// the held rows so that no table is cut.
    osu_notes: Vec<String>,
}

impl<W: Write> Reporter<W> {
    /// A reporter writing to `out` (`None` on ranks that print nothing).
    pub fn new(out: Option<W>, format: Format, cols: Columns, meta: Meta) -> Self {
        Reporter {
            out,
            error: None,
            format,
            cols,
            meta,
            rows: Vec::new(),
            json_path: None,
            progress: None,
            osu_table: None,
            osu_held: Vec::new(),
            osu_notes: Vec::new(),
        }
    }

    /// Also write the JSON document to `path` at the end, whatever the format (rank 0 only).
    pub fn with_json(mut self, path: Option<PathBuf>) -> Self {
        self.json_path = path;
        self
    }

    /// Show a progress bar of `rows` rows on standard error, where this reporter writes and standard
    /// error is a terminal.
    pub fn with_progress(mut self, rows: u64) -> Self {
        if self.out.is_some() {
            self.progress = Progress::on_terminal(rows, self.meta.benchmark);
        }
        self
    }

    /// Record the NCCL release a backend loaded: a field of every record from now on.
    pub fn nccl_version(&mut self, version: String) {
        self.meta.machine.nccl_version = Some(version);
    }

    fn write(&mut self, f: impl FnOnce(&mut W) -> io::Result<()>) {
        let progress = self.progress.as_ref();
        if let Some(out) = self.out.as_mut() {
            let written = match progress {
                Some(p) => p.suspend(|| f(out).and_then(|()| out.flush())),
                None => f(out).and_then(|()| out.flush()),
            };
            if let Err(e) = written {
                self.error = Some(e);
                self.out = None;
            }
        }
    }

    /// Write the header (table, CSV) and the notes (CSV: on standard error).
    pub fn begin(&mut self) {
        let (format, cols) = (self.format, self.cols);
        let lines: Vec<String> = match format {
            Format::Table => table_preamble(&self.meta, cols)
                .into_iter()
                .chain(table_header(cols))
                .collect(),
            Format::Csv => {
                if self.out.is_some() {
                    for n in &self.meta.notes {
                        eprintln!("collbench: note: {n}");
                    }
                }
                vec![Record::csv_header()]
            }
            Format::Json | Format::Osu => Vec::new(),
        };
        self.write(|out| lines.iter().try_for_each(|l| writeln!(out, "{l}")));
    }

    /// OSU's lines of `row`: its table's header where it starts a table, then the row.
    fn osu_lines(&mut self, row: &Row) -> Vec<String> {
        let mut lines = Vec::new();
        let table = (row.backend, row.variant, row.dtype, row.redop);
        if self.osu_table != Some(table) {
            self.osu_table = Some(table);
            lines.extend(crate::output::osu::collective_header(
                self.meta.benchmark,
                row,
                self.cols.minmax,
                self.meta.check,
            ));
        }
        lines.push(crate::output::osu::collective_row(
            self.meta.benchmark,
            row,
            self.meta.iters,
            self.cols.minmax,
        ));
        lines
    }

    /// Write the OSU rows held back (variants after the first), each variant's as one table.
    fn flush_osu(&mut self) {
        let mut held = std::mem::take(&mut self.osu_held);
        held.sort_by_key(|r| r.variant); // stable: sizes stay in order within a variant
        let mut lines = std::mem::take(&mut self.osu_notes);
        if !lines.is_empty() {
            lines.insert(0, String::new());
        }
        lines.extend(held.iter().flat_map(|r| self.osu_lines(r)));
        self.write(|out| lines.iter().try_for_each(|l| writeln!(out, "{l}")));
    }

    /// A line announcing the next block of rows (table and OSU only), e.g. a new backend.
    pub fn section(&mut self, title: &str) {
        if self.format == Format::Osu {
            self.flush_osu();
        }
        if matches!(self.format, Format::Table | Format::Osu) {
            self.write(|out| writeln!(out, "# {title}"));
        }
    }

    /// A fact about what the run runs on (library version, device), learnt once a backend has started:
    /// a `#` line in the table, a line on standard error with CSV (rank 0 only), an entry of
    /// `environment` in JSON.
    pub fn environment(&mut self, line: &str) {
        match self.format {
            Format::Table => self.write(|out| writeln!(out, "#  {line}")),
            Format::Csv => {
                if self.out.is_some() {
                    eprintln!("collbench: {line}");
                }
            }
            Format::Json | Format::Osu => {}
        }
        self.meta.environment.push(line.to_string());
    }

    /// As [`environment`](Self::environment), once: a line already recorded is not repeated. With
    /// OSU's tables too, as a `#` line (such as the path a persistent plan took).
    pub fn environment_once(&mut self, line: &str) {
        if self.meta.environment.iter().any(|l| l == line) {
            return;
        }
        if self.format == Format::Osu {
            self.osu_notes.push(format!("# {line}"));
        }
        self.environment(line);
    }

    /// Record a row, and write it at once for table, OSU and CSV.
    pub fn row(&mut self, row: Row) {
        let mut lines = Vec::new();
        match self.format {
            Format::Table => lines.push(table_row(&row, self.cols)),
            Format::Csv => lines.extend(records(&row, &self.meta).iter().map(Record::csv_line)),
            Format::Json => {}
            Format::Osu => {
                // The first variant's rows are written at once; the others' after, as tables
                // of their own, so that each table is one variant's sizes in order.
                let first = self.rows.first().map_or(row.variant, |r| r.variant);
                if row.variant == first {
                    lines.extend(self.osu_lines(&row));
                } else {
                    self.osu_held.push(row.clone());
                }
            }
        }
        self.write(|out| lines.iter().try_for_each(|l| writeln!(out, "{l}")));
        if let Some(p) = &self.progress {
            p.tick(row.size);
        }
        self.rows.push(row);
    }

    /// The rows recorded so far.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The run's JSON document so far.
    pub fn document(&self) -> Document {
        let records = self
            .rows
            .iter()
            .flat_map(|r| records(r, &self.meta))
            .collect();
        document(&self.meta, records)
    }

    /// Write the footer (table) or the whole document (JSON), and the JSON file of
    /// [`with_json`](Self::with_json).
    ///
    /// # Errors
    /// The first write error of the run.
    pub fn finish(&mut self) -> io::Result<()> {
        if let Some(p) = self.progress.take() {
            p.finish();
        }
        if self.format == Format::Osu {
            self.flush_osu();
        }
        let text = match self.format {
            Format::Table => {
                let mut lines = crate::measure::variant::comparison_lines(&self.rows)
                    .into_iter()
                    .map(|l| format!("# {l}"))
                    .collect::<Vec<_>>();
                lines.extend(table_footer(&self.rows, self.meta.check));
                lines.join("\n") + "\n"
            }
            Format::Csv | Format::Osu => String::new(),
            Format::Json => self.document().to_json(),
        };
        self.write(|out| out.write_all(text.as_bytes()));
        if let (Some(path), true) = (self.json_path.take(), self.out.is_some()) {
            if let Err(e) = std::fs::write(&path, self.document().to_json()) {
                self.error.get_or_insert(io::Error::new(
                    e.kind(),
                    format!("writing {}: {e}", path.display()),
                ));
            }
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Wrong elements over every row and placement (0 without `-c 1`).
    pub fn wrong(&self) -> u64 {
        wrong_total(&self.rows)
    }
}

/// Wrong elements over `rows`, both placements where there are two.
pub fn wrong_total(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| {
            r.oop.wrong.unwrap_or(0)
                + if r.in_place {
                    r.ip.wrong.unwrap_or(0)
                } else {
                    0
                }
        })
        .sum()
}

/// The table's closing lines: total wrong values and the average bus bandwidth (over rows and both
/// placements, as nccl-tests averages it).
pub fn table_footer(rows: &[Row], check: bool) -> Vec<String> {
    let wrong = wrong_total(rows);
    let wrong_line = if !check {
        "# wrong values total  : N/A (-c 0)".to_string()
    } else if wrong == 0 {
        "# wrong values total  : 0 OK".to_string()
    } else {
        format!("# wrong values total  : {wrong} FAILED")
    };
    let placements: usize = rows.iter().map(|r| 1 + usize::from(r.in_place)).sum();
    let avg = if rows.is_empty() {
        0.0
    } else {
        rows.iter()
            .map(|r| r.oop.busbw + if r.in_place { r.ip.busbw } else { 0.0 })
            .sum::<f64>()
            / placements as f64
    };
    vec![
        "#".to_string(),
        wrong_line,
        format!("# avg bus bandwidth   : {avg:.3} GB/s"),
        "#".to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::timing::Spread;

    fn placement(us: f64, wrong: Option<u64>) -> Placement {
        Placement {
            time: Spread {
                avg: us * 1e-6,
                min: (us - 1.0) * 1e-6,
                max: (us + 1.0) * 1e-6,
            },
            algbw: 0.5,
            busbw: 0.5,
            wrong,
            iter: None,
        }
    }

    pub(crate) fn row() -> Row {
        Row {
            backend: "mpi",
            variant: "library",
            size: 1024,
            count: 256,
            dtype: "float",
            redop: "sum",
            root: -1,
            oop: placement(10.0, Some(0)),
            ip: placement(12.5, Some(3)),
            in_place: true,
        }
    }

    fn meta() -> Meta {
        Meta {
            benchmark: "allreduce",
            nranks: 2,
            backends: vec!["mpi"],
            checked: true,
            min_bytes: 8,
            max_bytes: 8,
            step: "2(factor)".into(),
            warmup_iters: 1,
            iters: 1,
            check: true,
            notes: vec!["nccl: not available: no CUDA driver".into()],
            environment: Vec::new(),
            machine: Machine {
                host: "node1".into(),
                cores: 2,
                mpi_library: "Open MPI v4.1.4".into(),
                nccl_version: None,
            },
        }
    }

    #[test]
    fn rows_become_one_record_per_placement() {
        let r = records(&row(), &meta());
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].placement.as_str(), r[1].placement.as_str()),
            ("out-of-place", "in-place")
        );
        assert_eq!(
            (r[0].time_us, r[0].time_min_us, r[0].time_max_us),
            (10.0, 9.0, 11.0)
        );
        assert_eq!((r[0].wrong, r[1].wrong), (Some(0), Some(3)));
        assert_eq!((r[0].op.as_deref(), r[0].root), (Some("sum"), None));
        assert_eq!((r[0].host.as_str(), r[0].ranks), ("node1", 2));
        let mut one = row();
        one.in_place = false;
        one.redop = "none";
        one.root = 1;
        let r = records(&one, &meta());
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].op.clone(), r[0].root), (None, Some(1)));
    }

    #[test]
    fn csv_and_json_carry_the_records() {
        let mut r = Reporter::new(Some(Vec::new()), Format::Csv, Columns::default(), meta());
        r.begin();
        r.row(row());
        r.finish().unwrap();
        let text = String::from_utf8(r.out.take().unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], Record::csv_header());
        assert!(lines[1].contains(",out-of-place,float,sum,,2,1024,256,10.0,9.0,11.0,1,0.5,0.5,0,"));
        let mut r = Reporter::new(Some(Vec::new()), Format::Json, Columns::default(), meta());
        r.begin();
        r.environment("nccl: NCCL 2.21.5");
        r.nccl_version("2.21.5".into());
        r.row(row());
        r.finish().unwrap();
        let text = String::from_utf8(r.out.take().unwrap()).unwrap();
        let doc = Document::from_json(&text).unwrap();
        assert_eq!(doc.records.len(), 2);
        assert_eq!(doc.records[1].nccl_version.as_deref(), Some("2.21.5"));
        assert_eq!(doc.environment, ["nccl: NCCL 2.21.5"]);
        assert_eq!(doc.notes, ["nccl: not available: no CUDA driver"]);
        assert_eq!(doc.settings["maxbytes"], serde_json::json!(8));
    }

    #[test]
    fn the_json_file_is_written_beside_the_table() {
        let path =
            std::env::temp_dir().join(format!("collbench-report-{}.json", std::process::id()));
        let mut r = Reporter::new(Some(Vec::new()), Format::Table, Columns::default(), meta())
            .with_json(Some(path.clone()));
        r.begin();
        r.row(row());
        r.finish().unwrap();
        let doc = Document::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(doc.records.len(), 2);
        std::fs::remove_file(&path).unwrap();
        // Ranks without output write no file.
        let mut r = Reporter::<Vec<u8>>::new(None, Format::Table, Columns::default(), meta())
            .with_json(Some(path.clone()));
        r.row(row());
        r.finish().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn table_lines_align() {
        for cols in [
            Columns::default(),
            Columns {
                minmax: true,
                iter_stats: true,
                variants: true,
            },
        ] {
            let head = table_header(cols);
            let r = table_row(&row(), cols);
            assert_eq!(head[1].len(), r.len(), "{head:?}\n{r}");
            assert!(head.iter().all(|l| l.starts_with('#')));
            assert!(head[0].contains("out-of-place") && head[0].contains("in-place"));
        }
        let r = table_row(&row(), Columns::default());
        assert!(r.contains("float") && r.contains("10.00") && r.contains("12.50"));
        let cols = Columns {
            variants: true,
            ..Columns::default()
        };
        assert!(table_header(cols)[1].contains("variant"));
        assert!(table_row(&row(), cols).contains("library"));
    }

    #[test]
    fn times_format_like_nccl_tests() {
        assert_eq!(fmt_time_us(3.25), "3.25");
        assert_eq!(fmt_time_us(1.234), "1.23");
        assert_eq!(fmt_time_us(123.456), "123.5");
        assert_eq!(fmt_time_us(12345.6), "12346");
        assert_eq!(rounded(1.23456, 3), 1.235);
        assert_eq!(rounded(f64::INFINITY, 3), 0.0);
    }

    #[test]
    fn reporter_writes_table() {
        let mut r = Reporter::new(Some(Vec::new()), Format::Table, Columns::default(), meta());
        r.begin();
        r.row(row());
        r.section("backend nccl");
        r.environment("nccl: NCCL 2.21.5, device 0");
        r.environment_once("nccl: NCCL 2.21.5, device 0");
        r.finish().unwrap();
        assert_eq!(r.wrong(), 3);
        let text = String::from_utf8(r.out.take().unwrap()).unwrap();
        assert!(text.starts_with("# collbench allreduce: nranks 2, backend mpi, checked on\n"));
        assert!(text.contains("#  note: nccl: not available: no CUDA driver"));
        assert!(text.contains("\n# backend nccl\n#  nccl: NCCL 2.21.5, device 0\n"));
        assert_eq!(text.matches("device 0").count(), 1, "{text}");
        assert!(text.contains("3 FAILED"));
        // Ranks other than 0 write nothing.
        let mut r = Reporter::<Vec<u8>>::new(None, Format::Csv, Columns::default(), meta());
        r.begin();
        r.row(row());
        assert!(r.finish().is_ok());
        assert_eq!(r.rows().len(), 1);
    }

    #[test]
    fn iteration_statistics() {
        let s = IterStats::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.min, s.p50, s.p99), (1.0, 3.0, 5.0));
        let many: Vec<f64> = (1..=200).map(f64::from).collect();
        let s = IterStats::of(&many);
        assert_eq!((s.min, s.p50, s.p99), (1.0, 100.0, 198.0));
        assert_eq!(IterStats::of(&[]).p99, 0.0);
    }

    #[test]
    fn without_an_in_place_form_the_columns_read_na() {
        let cols = Columns {
            iter_stats: true,
            ..Columns::default()
        };
        let mut r = row();
        r.in_place = false;
        let t = table_row(&r, cols);
        assert!(t.trim_end().ends_with("N/A"), "{t}");
        // The footer counts the one placement only.
        let f = table_footer(&[r], true);
        assert!(f[1].contains("0 OK"), "{f:?}");
        assert!(f[2].contains("0.500"));
        let minmax = Columns {
            minmax: true,
            iter_stats: true,
            ..Columns::default()
        };
        assert_eq!(
            table_header(minmax)[1].len(),
            table_row(&row(), minmax).len()
        );
    }

    #[test]
    fn osu_tables_hold_one_variant_each() {
        let mut r = Reporter::new(Some(Vec::new()), Format::Osu, Columns::default(), meta());
        r.begin();
        for size in [8, 16] {
            r.environment_once("persistent: allreduce out-of-place on mpi: replay");
            for variant in ["library", "persistent"] {
                r.row(Row {
                    size,
                    variant,
                    ..row()
                });
            }
        }
        r.finish().unwrap();
        let text = String::from_utf8(r.out.take().unwrap()).unwrap();
        let titles: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("Latency Test"))
            .collect();
        assert_eq!(
            titles,
            [
                "# OSU MPI Allreduce Latency Test v7.4",
                "# OSU MPI Allreduce Persistent Latency Test v7.4"
            ],
            "{text}"
        );
        let sizes: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(char::is_numeric))
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(sizes, ["8", "16", "8", "16"]);
        // The note comes once, after the first table, not inside it.
        assert_eq!(text.matches("on mpi: replay").count(), 1);
        let note = text.find("on mpi: replay").unwrap();
        assert!(note > text.find("\n16 ").unwrap() && note < text.find("Persistent").unwrap());
    }

    #[test]
    fn footer_counts_wrong() {
        let f = table_footer(&[row()], true);
        assert!(f[1].contains("3 FAILED"));
        assert!(f[2].contains("0.500"));
        let f = table_footer(&[], false);
        assert!(f[1].contains("N/A"));
    }
}
