//! A run's transitions as text on its own row (`compact-timeline`, migration 1014).
//!
//! One line per transition, oldest first, each ending in `\n`:
//!
//! ```text
//! [@OFFSET ][<FROM ][!REASON ]TO
//! ```
//!
//! - `@OFFSET`: milliseconds from the run's `created_at` (may be negative when a
//!   replica's clock is behind). A line without it has the offset of the line
//!   before it; the first line of each commit always writes it.
//! - `<FROM`: the state it left, written only when that is not the `TO` of the
//!   line before it (for the first line: not `created`, the state a run starts in).
//! - `!REASON`: the reason, a JSON string, when there is one.
//! - a state name is written bare when it is made of `[A-Za-z0-9_.:-]` only, and
//!   as a JSON string otherwise.
//!
//! A line's sequence number is its position (the first is 1): the commit that
//! appends lines checks that the row holds exactly the lines before them, so a
//! sequence is never written twice nor skipped.
//!
//! Whether a commit's first line can leave out `<FROM` depends on what the row
//! already ends with, which only the database knows at the moment of the write:
//! the writer sends both forms and the statement picks one (see
//! [`Append::choice_sql`]).

use super::Dialect;
use caseops_runtime::Checkpoint;
use serde_json::Value;

/// The state a run is created in: the `FROM` of a first line that names none.
/// A macro, so that the SQL of [`Append::choice_sql`] is built from it.
macro_rules! initial {
    () => {
        "created"
    };
}
const INITIAL: &str = initial!();

/// What one commit appends to a run's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Append {
    /// The lines when the row already ends in the first transition's `from`.
    pub short: String,
    /// The lines with the first transition's `from` written out.
    pub long: String,
    /// The first transition's `from`, when it is bare (else only `long` is used).
    pub from: Option<String>,
    /// How many lines the row must already hold: the first sequence minus one.
    pub before: i64,
}

impl Append {
    /// SQL for the text to append: `short` when the row ends in the first
    /// transition's `from` as a line's last name (`" FROM\n"` or `"\nFROM\n"`),
    /// else `long`. Parameters, in order: N (the endings' length), the two
    /// endings, `short`, `long` (see [`Append::endings`]).
    pub fn choice_sql(dialect: Dialect) -> &'static str {
        // An empty history stands for a run still in its initial state.
        match dialect {
            Dialect::Sqlite => {
                concat!(
                    "CASE WHEN substr(char(10) || COALESCE(NULLIF(history, ''), '",
                    initial!(),
                    "' || char(10)), -?) IN (?, ?) THEN ? ELSE ? END"
                )
            }
            Dialect::Postgres => {
                concat!(
                    "CASE WHEN right(chr(10) || COALESCE(NULLIF(history, ''), '",
                    initial!(),
                    "' || chr(10)), CAST(? AS INTEGER)) IN (?, ?) THEN ? ELSE ? END"
                )
            }
        }
    }

    /// SQL true when the row holds exactly the lines before this commit's.
    /// Parameter: [`Append::before`].
    pub fn guard_sql(dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::Sqlite => "length(history) - length(replace(history, char(10), '')) = ?",
            Dialect::Postgres => "length(history) - length(replace(history, chr(10), '')) = ?",
        }
    }

    /// The parameters `choice_sql` takes after N: the endings, then the forms.
    pub fn endings(&self) -> Option<(i64, String, String)> {
        self.from
            .as_ref()
            .map(|f| (f.len() as i64 + 2, format!(" {f}\n"), format!("\n{f}\n")))
    }
}

fn is_bare(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

fn push_name(out: &mut String, name: &str) {
    if is_bare(name) {
        out.push_str(name);
    } else {
        out.push_str(&Value::String(name.to_string()).to_string());
    }
}

/// What a commit appends for `checkpoints` (in sequence order, contiguous) of a
/// run created at `created_at`. `None` when they are not contiguous: the caller
/// then has nothing it can append.
pub(crate) fn append(checkpoints: &[Checkpoint], created_at: i64) -> Option<Append> {
    let first = checkpoints.first()?;
    let contiguous = checkpoints
        .windows(2)
        .all(|w| w[0].sequence + 1 == w[1].sequence);
    if !contiguous || first.sequence == 0 {
        return None;
    }
    let mut rest = String::new();
    let mut offset = offset_of(first, created_at);
    for pair in checkpoints.windows(2) {
        let (before, cp) = (&pair[0], &pair[1]);
        let at = offset_of(cp, created_at);
        let from = (cp.from != before.to).then_some(cp.from.as_str());
        line(&mut rest, (at != offset).then_some(at), from, cp);
        offset = at;
    }
    let first_line = |from: Option<&str>| {
        let mut text = String::new();
        line(&mut text, Some(offset_of(first, created_at)), from, first);
        text.push_str(&rest);
        text
    };
    Some(Append {
        short: first_line(None),
        long: first_line(Some(&first.from)),
        from: is_bare(&first.from).then(|| first.from.clone()),
        before: first.sequence as i64 - 1,
    })
}

fn offset_of(cp: &Checkpoint, created_at: i64) -> i64 {
    cp.at_ms as i64 - created_at
}

fn line(out: &mut String, offset: Option<i64>, from: Option<&str>, cp: &Checkpoint) {
    if let Some(o) = offset {
        out.push('@');
        out.push_str(&o.to_string());
        out.push(' ');
    }
    if let Some(f) = from {
        out.push('<');
        push_name(out, f);
        out.push(' ');
    }
    if let Some(r) = &cp.reason {
        out.push('!');
        out.push_str(&Value::String(r.clone()).to_string());
        out.push(' ');
    }
    push_name(out, &cp.to);
    out.push('\n');
}

/// Why a stored history could not be read: the line (1-based) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable {
    pub line: usize,
    pub message: String,
}

/// The transitions a run's `history` holds, for a run `run_id` created at
/// `created_at`. Their snapshots are `null` (the newest lives in the row).
pub(crate) fn read(
    history: &str,
    created_at: i64,
    run_id: &str,
) -> Result<Vec<Checkpoint>, Unreadable> {
    let mut out: Vec<Checkpoint> = Vec::new();
    let mut offset = 0i64;
    let Some(body) = history.strip_suffix('\n') else {
        return if history.is_empty() {
            Ok(out)
        } else {
            Err(Unreadable {
                line: history.lines().count(),
                message: "the last line does not end".into(),
            })
        };
    };
    for (i, text) in body.split('\n').enumerate() {
        let at = |message: String| Unreadable {
            line: i + 1,
            message,
        };
        let mut rest = text;
        let mut from = None;
        let mut reason = None;
        if let Some(r) = rest.strip_prefix('@') {
            let (number, r) = r
                .split_once(' ')
                .ok_or_else(|| at("an offset ends the line".into()))?;
            offset = number
                .parse()
                .map_err(|_| at(format!("`{number}` is not an offset")))?;
            rest = r;
        }
        if let Some(r) = rest.strip_prefix('<') {
            let (name, r) = name(r).map_err(&at)?;
            from = Some(name);
            rest = r
                .strip_prefix(' ')
                .ok_or_else(|| at("a `from` ends the line".into()))?;
        }
        if let Some(r) = rest.strip_prefix('!') {
            let (text, r) = json_string(r).map_err(&at)?;
            reason = Some(text);
            rest = r
                .strip_prefix(' ')
                .ok_or_else(|| at("a reason ends the line".into()))?;
        }
        let (to, r) = name(rest).map_err(&at)?;
        if !r.is_empty() {
            return Err(at(format!("`{r}` follows the state")));
        }
        let from = from.unwrap_or_else(|| {
            out.last()
                .map_or_else(|| INITIAL.to_string(), |before| before.to.clone())
        });
        let at_ms = created_at
            .checked_add(offset)
            .filter(|v| *v >= 0)
            .ok_or_else(|| at(format!("the offset `{offset}` is out of range")))?;
        out.push(Checkpoint {
            run_id: run_id.to_string(),
            sequence: i as u64 + 1,
            from,
            to,
            at_ms: at_ms as u64,
            reason,
            snapshot: None,
        });
    }
    Ok(out)
}

/// A state name at the start of `text`, and what follows it.
fn name(text: &str) -> Result<(String, &str), String> {
    if text.starts_with('"') {
        return json_string(text);
    }
    let end = text.find(' ').unwrap_or(text.len());
    let (name, rest) = text.split_at(end);
    if is_bare(name) {
        Ok((name.to_string(), rest))
    } else {
        Err(format!("`{name}` is not a state name"))
    }
}

/// A JSON string at the start of `text`, and what follows it.
fn json_string(text: &str) -> Result<(String, &str), String> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<String>();
    match stream.next() {
        Some(Ok(s)) => Ok((s, &text[stream.byte_offset()..])),
        _ => Err(format!("`{text}` does not start with a JSON string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(sequence: u64, from: &str, to: &str, at_ms: u64, reason: Option<&str>) -> Checkpoint {
        Checkpoint {
            run_id: "r".into(),
            sequence,
            from: from.into(),
            to: to.into(),
            at_ms,
            reason: reason.map(str::to_string),
            snapshot: None,
        }
    }

    #[test]
    fn a_commit_of_plain_transitions_writes_one_short_line_each() {
        let batch = [
            cp(1, "created", "planning", 1000, None),
            cp(2, "planning", "tool_proposed", 1000, None),
            cp(3, "tool_proposed", "tool_running", 1002, None),
        ];
        let a = append(&batch, 1000).unwrap();
        assert_eq!(a.short, "@0 planning\ntool_proposed\n@2 tool_running\n");
        assert_eq!(
            a.long,
            "@0 <created planning\ntool_proposed\n@2 tool_running\n"
        );
        assert_eq!(a.before, 0);
        assert_eq!(
            a.endings(),
            Some((9, " created\n".into(), "\ncreated\n".into()))
        );
        assert_eq!(read(&a.short, 1000, "r").unwrap(), batch);
        assert_eq!(read(&a.long, 1000, "r").unwrap(), batch);
    }

    #[test]
    fn commits_appended_one_after_another_read_back_in_sequence() {
        let first = [
            cp(1, "created", "planning", 50, None),
            cp(2, "planning", "observing", 51, None),
        ];
        // A `from` that is not the line before's `to`, a reason with what the
        // format itself uses, and names that are not bare.
        let second = [
            cp(
                3,
                "observing",
                "odd state",
                40,
                Some("a \"quoted\"\nreason @ <x"),
            ),
            cp(4, "elsewhere", "\"q\"", 40, None),
            cp(5, "\"q\"", "done", 70, Some("")),
        ];
        let one = append(&first, 60).unwrap();
        let two = append(&second, 60).unwrap();
        assert_eq!(two.before, 2);
        let history = format!("{}{}", one.short, two.short);
        let mut all = first.to_vec();
        all.extend(second.iter().cloned());
        assert_eq!(read(&history, 60, "r").unwrap(), all);
        // The long form of a commit reads the same wherever it lands.
        let history = format!("{}{}", one.long, two.long);
        assert_eq!(read(&history, 60, "r").unwrap(), all);
    }

    #[test]
    fn a_first_state_that_is_not_bare_has_only_the_long_form() {
        let a = append(&[cp(4, "a state", "b", 9, None)], 9).unwrap();
        assert_eq!(a.from, None);
        assert_eq!(a.long, "@0 <\"a state\" b\n");
    }

    #[test]
    fn transitions_with_a_gap_have_nothing_to_append() {
        assert_eq!(
            append(&[cp(1, "a", "b", 0, None), cp(3, "b", "c", 0, None)], 0),
            None
        );
        assert_eq!(append(&[], 0), None);
        assert_eq!(append(&[cp(0, "a", "b", 0, None)], 0), None);
    }

    #[test]
    fn a_damaged_history_is_refused_with_its_line() {
        for (history, line) in [
            ("planning", 1),
            ("planning\n@x b\n", 2),
            ("planning\n<a\n", 2),
            ("planning\n!\"open b\n", 2),
            ("a b\n", 1),
            ("\n", 1),
            ("@-5000 a\n", 1),
        ] {
            let err = read(history, 1000, "r").unwrap_err();
            assert_eq!(err.line, line, "{history:?}: {err:?}");
        }
        assert_eq!(read("", 5, "r").unwrap(), vec![]);
    }
}
