//! Where the results of the subcommands with tables of their own (`p2p`, `halo`, `overlap`,
//! `pack`, `allgatherv`) go: one [`Sink`] per run, on every rank, that writes on rank 0 only.
//!
//! A subcommand hands each measured result to [`Sink::result`] twice over: as the lines of its
//! human table and as [`Record`]s of the one schema. The sink writes whichever the format asks for
//! (the table lines for `--format table` and OSU's tables, CSV lines as the records come, the JSON
//! [`Document`] once at the end), so every subcommand's CSV and JSON is the same schema written
//! the same way, and only the table text is the subcommand's own.
//!
//! Writing never interrupts the run (every rank must keep making the same calls): the first write
//! error stops the output and is returned by [`Sink::finish`].

use std::io::{self, Write};
use std::path::Path;

use crate::output::record::{Document, Emitter, Format, Machine, Record};

/// The output of one run of a subcommand; see the [module documentation](self).
pub struct Sink {
    out: Option<Box<dyn Write>>,
    emitter: Emitter,
    error: Option<io::Error>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("writes", &self.out.is_some())
            .field("emitter", &self.emitter)
            .finish_non_exhaustive()
    }
}

impl Sink {
    /// A sink writing `doc`'s records (usually none yet) as `format` says to `out` (`None` on the
    /// ranks that write nothing).
    pub fn new(out: Option<Box<dyn Write>>, format: Format, doc: Document) -> Self {
        Sink {
            out,
            emitter: Emitter::new(format, doc),
            error: None,
        }
    }

    /// A sink that writes on rank 0 only, to the file of `--output` or else standard output.
    ///
    /// # Errors
    /// The file cannot be created.
    pub fn open(
        rank: usize,
        path: Option<&Path>,
        format: Format,
        doc: Document,
    ) -> anyhow::Result<Self> {
        let out = match rank {
            0 => crate::output::record::output(0, path)?,
            _ => None,
        };
        Ok(Sink::new(out, format, doc))
    }

    /// The format written.
    pub fn format(&self) -> Format {
        self.emitter.format()
    }

    /// Whether the subcommand's own table is written (`--format table`, or OSU's tables).
    pub fn table(&self) -> bool {
        self.emitter.table()
    }

    /// Whether this rank writes.
    pub fn writes(&self) -> bool {
        self.out.is_some()
    }

    /// The JSON document: its settings, notes and the records so far (with `--format json`).
    pub fn doc(&self) -> &Document {
        self.emitter.doc()
    }

    /// The document, to add settings, notes and the like before the records come.
    pub fn doc_mut(&mut self) -> &mut Document {
        self.emitter.doc_mut()
    }

    /// Writes through `f` where this rank writes and no write failed yet.
    fn write(&mut self, f: impl FnOnce(&mut dyn Write, &mut Emitter) -> io::Result<()>) {
        if self.error.is_some() {
            return;
        }
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = f(out, &mut self.emitter).and_then(|()| out.flush()) {
                self.error = Some(e);
                self.out = None;
            }
        }
    }

    /// Writes `lines` as they are, whatever the format (the caller picks when).
    pub fn lines(&mut self, lines: impl IntoIterator<Item = String>) {
        self.write(|out, _| lines.into_iter().try_for_each(|l| writeln!(out, "{l}")));
    }

    /// Writes what `head` gives in the table formats, the CSV header with CSV.
    pub fn begin(&mut self, head: impl FnOnce() -> Vec<String>) {
        if self.table() {
            if self.writes() {
                self.lines(head());
            }
        } else {
            self.write(|out, e| e.begin(out));
        }
    }

    /// Writes what `lines` gives in the table formats only.
    pub fn table_lines(&mut self, lines: impl FnOnce() -> Vec<String>) {
        if self.table() && self.writes() {
            self.lines(lines());
        }
    }

    /// Something left out or learnt: `note` in the JSON document's notes, `table_line` in the
    /// table formats, and `stderr_line` on standard error with CSV (rank 0), so that standard
    /// output stays plain CSV.
    pub fn note(&mut self, note: String, table_line: Option<String>, stderr_line: Option<String>) {
        match (self.format(), table_line, stderr_line) {
            (Format::Table | Format::Osu, Some(l), _) => self.lines([l]),
            (Format::Csv, _, Some(l)) if self.writes() => eprintln!("{l}"),
            _ => {}
        }
        self.doc_mut().notes.push(note);
    }

    /// One measured result: its table lines (`table`) in the table formats, its records of the
    /// one schema (`records`, given the run's machine and ranks) with CSV and JSON.
    pub fn result(
        &mut self,
        table: impl FnOnce() -> Vec<String>,
        records: impl FnOnce(&Machine, usize) -> Vec<Record>,
    ) {
        if self.table() {
            self.table_lines(table);
        } else if self.writes() || self.format() == Format::Json {
            let doc = self.doc();
            let recs = records(&doc.machine, doc.ranks);
            match self.out.as_mut() {
                Some(_) => self.write(|out, e| e.emit(out, recs)),
                None => {
                    let _ = self.emitter.emit(&mut io::sink(), recs);
                }
            }
        }
    }

    /// Writes `footer` in the table formats, the JSON document with JSON, and returns the first
    /// write error of the run.
    ///
    /// # Errors
    /// The first write error of the run.
    pub fn finish(mut self, footer: impl FnOnce() -> Vec<String>) -> io::Result<()> {
        self.table_lines(footer);
        let Sink {
            out,
            emitter,
            error,
        } = self;
        match (error, out) {
            (Some(e), _) => Err(e),
            (None, Some(mut out)) => emitter.finish(&mut out),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::output::record::tests::record;

    /// A writer whose bytes the test reads back.
    #[derive(Clone, Default)]
    pub(crate) struct Shared(pub std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.borrow().clone()).unwrap()
        }
    }

    /// `lines` as the text they make on a terminal: a line break after each.
    pub(crate) fn text_of(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// Asserts that `lines` make the text `want` (a golden file's).
    pub(crate) fn golden(lines: &[String], want: &str) {
        assert_eq!(text_of(lines), want);
    }

    fn run(format: Format) -> String {
        let buf = Shared::default();
        let doc = Document::new("p2p", 2, Machine::default());
        let mut s = Sink::new(Some(Box::new(buf.clone())), format, doc);
        s.begin(|| vec!["# head".into()]);
        s.note("x: left out".into(), Some("#  x: left out".into()), None);
        s.result(|| vec!["row".into()], |_, ranks| vec![record(); ranks]);
        s.finish(|| vec!["# foot".into()]).unwrap();
        buf.text()
    }

    #[test]
    fn each_format_gets_its_part() {
        assert_eq!(run(Format::Table), "# head\n#  x: left out\nrow\n# foot\n");
        assert_eq!(run(Format::Osu), run(Format::Table));
        let csv = run(Format::Csv);
        assert_eq!(csv.lines().count(), 3, "{csv}");
        assert!(csv.starts_with(&Record::csv_header()));
        let doc = Document::from_json(&run(Format::Json)).unwrap();
        assert_eq!(
            (doc.records.len(), &doc.notes[..]),
            (2, &["x: left out".to_string()][..])
        );
        // A rank that writes nothing still keeps the JSON records, and nothing else happens.
        let mut s = Sink::new(
            None,
            Format::Json,
            Document::new("p2p", 1, Machine::default()),
        );
        s.result(Vec::new, |_, _| vec![record()]);
        assert_eq!(s.doc().records.len(), 1);
        assert!(s.finish(Vec::new).is_ok());
    }
}
