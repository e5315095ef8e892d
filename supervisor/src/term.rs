//! How a line reaches a terminal: standard output that may have lost its
//! reader, standard error, text shown as the store holds it, a span as a
//! person reads it, and an error as JSON with its exit status.

use std::io::{ErrorKind, Write};

/// Whether standard output's reader has gone away (a pipe whose other end
/// was closed), asked without writing: a follower that has nothing to
/// print learns it here rather than at its next line.
pub fn stdout_closed() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let out = std::io::stdout();
    let mut fds = [PollFd::new(out.as_fd(), PollFlags::empty())];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)),
        Err(_) => false,
    }
}

/// Writes to standard output; a reader that went away is not an error,
/// any other failure (a full disk, a closed descriptor) is.
pub fn try_write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// [`try_write_stdout`] for text whose loss the caller learns of otherwise
/// (the demo's timeline, the bench's tables).
pub fn write_stdout(text: &str) {
    if let Err(e) = try_write_stdout(text) {
        write_stderr(&format!("cannot write to standard output: {e}"));
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

/// A span as every human output writes one, in the form the options
/// take: `750ms`, `42s`, `1m57s`, `2h05m`, `3d04h` (two units at most).
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Whether errors are written for a person (standard error is a terminal
/// and JSON was not asked for): set once, when the command line is read.
static ERRORS_AS_TEXT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes errors as text from now on when `text` (see [`report_error`]).
pub fn errors_as_text(text: bool) {
    ERRORS_AS_TEXT.store(text, std::sync::atomic::Ordering::Relaxed);
}

/// Whether errors are written as text ([`errors_as_text`]).
pub fn errors_are_text() -> bool {
    ERRORS_AS_TEXT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Reports `e` on standard error, as JSON for a script, or as a line for a
/// person when [`errors_as_text`] said so; returns its exit status.
pub fn report_error(e: &baton_core::Error) -> i32 {
    if ERRORS_AS_TEXT.load(std::sync::atomic::Ordering::Relaxed) {
        let mut line = format!("error: {}", escape_unprintable(&e.message));
        if let Some(f) = &e.field {
            line.push_str(&format!(" (field: {})", escape_unprintable(f)));
        }
        if let Some(cause) = &e.source {
            line.push_str(&format!(
                "\n  caused by: {}",
                escape_unprintable(&cause.to_string())
            ));
        }
        line.push_str(&format!(
            "\n  [{}{}]",
            e.kind.as_str(),
            if e.kind.is_temporary() {
                ", temporary: try again"
            } else {
                ""
            }
        ));
        write_stderr(&line);
        return crate::exit::exit_code_for(e);
    }
    let mut body = serde_json::json!({"error": {
        "kind": e.kind.as_str(),
        "message": e.message,
        "field": e.field,
        "temporary": e.kind.is_temporary(),
    }});
    if let Some(store) = &e.context {
        body["error"]["store"] = serde_json::json!(store);
    }
    if let Some(cause) = &e.source {
        body["error"]["cause"] = serde_json::json!(cause.to_string());
    }
    write_stderr(&body.to_string());
    crate::exit::exit_code_for(e)
}
