//! Printing: one JSON object per line (or readable tables), and the exit
//! status that goes with it. A closed output pipe is a normal exit.

use crate::args::Format;
use crate::exit;
use serde_json::Value;
use std::io::{ErrorKind, Write};

/// How a command ended, for the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// A refusal, a gate that blocks, a fence that is not current.
    Refused,
    NotFound,
}

/// What a command prints.
#[derive(Debug)]
pub struct Out {
    pub items: Vec<Value>,
    /// The cursor for the next page, printed as a last `{"next": ...}` line.
    pub next: Option<String>,
    pub status: Status,
    /// Already printed (the demo's timeline): print nothing more.
    pub printed: bool,
}

impl Out {
    pub fn one(v: Value) -> Out {
        Out {
            items: vec![v],
            next: None,
            status: Status::Ok,
            printed: false,
        }
    }

    pub fn list(items: Vec<Value>, next: Option<String>) -> Out {
        Out {
            items,
            next,
            status: Status::Ok,
            printed: false,
        }
    }

    /// Prints and returns the exit status.
    pub fn print(&self, format: Format) -> i32 {
        let text = match format {
            _ if self.printed => String::new(),
            Format::Json => {
                let mut s = String::new();
                for v in &self.items {
                    s.push_str(&v.to_string());
                    s.push('\n');
                }
                if let Some(n) = &self.next {
                    s.push_str(&serde_json::json!({ "next": n }).to_string());
                    s.push('\n');
                }
                s
            }
            Format::Human => human(&self.items, self.next.as_deref()),
        };
        write_stdout(&text);
        match self.status {
            Status::Ok => exit::OK,
            Status::Refused => exit::REFUSED,
            Status::NotFound => exit::NOT_FOUND,
        }
    }
}

/// Writes to standard output; a reader that went away is not an error.
pub fn write_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        Err(_) => {}
    }
}

pub fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

/// `s` with every character a terminal would not show as itself (control,
/// format, line and paragraph separator characters) written as `\u{XXXX}`,
/// so what a table shows is what the store holds, on one line.
pub fn escape_unprintable(s: &str) -> String {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let hidden = c.is_control()
            || matches!(
                c.general_category(),
                GeneralCategory::Format
                    | GeneralCategory::LineSeparator
                    | GeneralCategory::ParagraphSeparator
                    | GeneralCategory::Unassigned
                    | GeneralCategory::PrivateUse
                    | GeneralCategory::Surrogate
            );
        if hidden {
            out.push_str(&format!("\\u{{{:04X}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn cell(v: &Value) -> String {
    let s = match v {
        Value::String(s) => escape_unprintable(s),
        Value::Null => "-".to_owned(),
        other => escape_unprintable(&other.to_string()),
    };
    if s.chars().count() > 48 {
        format!("{}…", s.chars().take(47).collect::<String>())
    } else {
        s
    }
}

/// Readable tables: one object as key/value rows, a list as columns.
pub fn human(items: &[Value], next: Option<&str>) -> String {
    let mut out = String::new();
    if items.len() == 1
        && next.is_none()
        && let Some(obj) = items[0].as_object()
    {
        let width = obj.keys().map(|k| k.len()).max().unwrap_or(0);
        for (k, v) in obj {
            let k = escape_unprintable(k);
            out.push_str(&format!("{k:<width$}  {}\n", cell(v)));
        }
        return out;
    }
    let mut columns: Vec<String> = Vec::new();
    for item in items {
        for (k, v) in item.as_object().into_iter().flatten() {
            if !v.is_object() && !v.is_array() && !columns.contains(k) {
                columns.push(k.clone());
            }
        }
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            columns
                .iter()
                .map(|c| cell(i.get(c).unwrap_or(&Value::Null)))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([c.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| -> String {
        let mut l = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        l.truncate(l.trim_end().len());
        l.push('\n');
        l
    };
    if items.is_empty() {
        out.push_str("(none)\n");
    } else {
        let header: Vec<String> = columns.iter().map(|c| escape_unprintable(c)).collect();
        out.push_str(&line(&header));
        for r in &rows {
            out.push_str(&line(r));
        }
    }
    if let Some(n) = next {
        out.push_str(&format!("next page: --after {}\n", escape_unprintable(n)));
    }
    out
}
