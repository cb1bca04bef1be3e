//! The report's stdout: buffered, and quiet about a reader that went away (`| head`).

use std::io::{self, BufWriter, StdoutLock, Write};

use anyhow::Result;

/// Writes the report for people to stdout at once, its control characters escaped
/// ([`escape_lines`](super::escape_lines)). A reader that went away (`| head`) is not
/// an error of the report.
pub(crate) fn print(text: &str) -> Result<()> {
    let mut out = Stdout::new();
    out.text(text)?;
    out.finish()
}

/// Writes `value` to stdout as one JSON line ([`json_line`](super::json_line)).
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<()> {
    let mut out = Stdout::new();
    out.json(value)?;
    out.finish()
}

/// The report's stdout, locked and buffered, for a report written as it is read. A
/// reader that went away (`| head`) is not an error of the report: writing then stops
/// quietly and [`Stdout::closed`] says so, so the report can stop reading too.
pub(crate) struct Stdout {
    out: BufWriter<StdoutLock<'static>>,
    closed: bool,
}

impl Stdout {
    pub(crate) fn new() -> Self {
        Stdout {
            out: BufWriter::with_capacity(64 * 1024, io::stdout().lock()),
            closed: false,
        }
    }

    /// Whether the reader went away: nothing more will be written.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// Text for people, its control characters escaped (line breaks and tabs kept).
    pub(crate) fn text(&mut self, text: &str) -> Result<()> {
        let text = super::escape_lines(text);
        self.write_all(text.as_bytes()).map_err(write_error)
    }

    /// `value` as one JSON line, safe on a terminal ([`json_line`](super::json_line)).
    pub(crate) fn json(&mut self, value: &impl serde::Serialize) -> Result<()> {
        let line = super::json_line(value)?;
        self.write_all(line.as_bytes()).map_err(write_error)
    }

    /// Flushes what is buffered; the end of the report.
    pub(crate) fn finish(mut self) -> Result<()> {
        self.flush().map_err(write_error)
    }

    fn tolerate<T>(&mut self, result: io::Result<T>, closed: T) -> io::Result<T> {
        match result {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(closed)
            }
            other => other,
        }
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let written = self.out.write(buf);
        self.tolerate(written, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let flushed = self.out.flush();
        self.tolerate(flushed, ())
    }
}

pub(crate) fn write_error(e: io::Error) -> anyhow::Error {
    anyhow::Error::new(e).context("cannot write the report to stdout")
}
