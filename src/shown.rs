//! Readable renderings of values for `tracing` fields, so that logs read as Redis output
//! (`(integer) 1`, `nil`, `"text"`) rather than as Rust's `Debug` of fred's types
//! (`Integer(1)`, `Null`, `Bytes(b"text")`, `Some(Server { .. })`).
//!
//! Used as `tracing::warn!(reply = %Reply(&value), ..)`: the rendering runs only when the event
//! is enabled.

use std::fmt::{self, Display, Formatter, Write};

use fred::types::{Key, Value};

/// Array elements (and map entries) shown before the rest is summarised: an unexpected reply
/// to a batch of 100 renewals should not fill a screen.
const MAX_ELEMENTS: usize = 16;

/// A Redis reply rendered as `redis-cli` shows it, on one line: `nil`, `(integer) 5`,
/// `"text"` (control characters escaped, bytes that are not UTF-8 as `\xNN`), `(double) 1.5`,
/// `(true)`, `[(integer) 1, nil]` (an empty one as `(empty array)`), `{"field" => "value"}`.
pub(crate) struct Reply<'a>(pub(crate) &'a Value);

impl Display for Reply<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            Value::Null => f.write_str("nil"),
            Value::Integer(n) => write!(f, "(integer) {n}"),
            Value::Double(x) => write!(f, "(double) {x}"),
            Value::Boolean(b) => write!(f, "({b})"),
            Value::String(text) => quoted(f, text.as_bytes()),
            Value::Bytes(bytes) => quoted(f, bytes),
            Value::Queued => f.write_str("QUEUED"),
            Value::Array(values) if values.is_empty() => f.write_str("(empty array)"),
            Value::Array(values) => elements(f, "[]", values.iter().map(|value| (None, value))),
            Value::Map(map) if map.is_empty() => f.write_str("(empty map)"),
            Value::Map(map) => elements(f, "{}", map.iter().map(|(key, value)| (Some(key), value))),
        }
    }
}

/// An optional value: the value's `Display`, or `none`.
pub(crate) struct OrNone<'a, T>(pub(crate) Option<&'a T>);

impl<T: Display> Display for OrNone<'_, T> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => value.fmt(f),
            None => f.write_str("none"),
        }
    }
}

/// The first [`MAX_ELEMENTS`] of an array's elements or a map's entries, within `brackets`.
fn elements<'v>(
    f: &mut Formatter<'_>,
    brackets: &str,
    items: impl ExactSizeIterator<Item = (Option<&'v Key>, &'v Value)>,
) -> fmt::Result {
    let len = items.len();
    let (open, close) = brackets.split_at(1);
    f.write_str(open)?;
    for (i, (key, value)) in items.take(MAX_ELEMENTS).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        if let Some(key) = key {
            quoted(f, key.as_bytes())?;
            f.write_str(" => ")?;
        }
        Reply(value).fmt(f)?;
    }
    if len > MAX_ELEMENTS {
        write!(f, ", … ({} more)", len - MAX_ELEMENTS)?;
    }
    f.write_str(close)
}

/// Quotes a string as `redis-cli` does, except that valid UTF-8 beyond ASCII is kept as text.
fn quoted(f: &mut Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    f.write_char('"')?;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if c.is_control() => {
                    // Control characters are all below U+00A0: as their UTF-8 bytes.
                    let mut buf = [0; 4];
                    for byte in c.encode_utf8(&mut buf).bytes() {
                        write!(f, "\\x{byte:02x}")?;
                    }
                }
                c => f.write_char(c)?,
            }
        }
        for byte in chunk.invalid() {
            write!(f, "\\x{byte:02x}")?;
        }
    }
    f.write_char('"')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(value: Value) -> String {
        Reply(&value).to_string()
    }

    #[test]
    fn replies_read_as_redis_cli_shows_them() {
        assert_eq!(shown(Value::Null), "nil");
        assert_eq!(shown(Value::Integer(5)), "(integer) 5");
        assert_eq!(shown(Value::Integer(-2)), "(integer) -2");
        assert_eq!(shown(Value::Double(1.5)), "(double) 1.5");
        assert_eq!(shown(Value::Boolean(true)), "(true)");
        assert_eq!(shown(Value::Queued), "QUEUED");
        assert_eq!(shown(Value::from("text")), "\"text\"");
        assert_eq!(
            shown(Value::Bytes(fred::bytes::Bytes::from_static(
                b"a\"b\\c\n\x00\xff"
            ))),
            r#""a\"b\\c\n\x00\xff""#
        );
        assert_eq!(shown(Value::from("zürich")), "\"zürich\"");
        assert_eq!(shown(Value::Array(vec![])), "(empty array)");
        assert_eq!(
            shown(Value::Array(vec![
                Value::Integer(1),
                Value::Null,
                Value::from("x"),
                Value::Array(vec![Value::Integer(0)]),
            ])),
            "[(integer) 1, nil, \"x\", [(integer) 0]]"
        );
    }

    #[test]
    fn long_arrays_are_summarised() {
        let flags = Value::Array(vec![Value::Integer(1); MAX_ELEMENTS + 84]);
        let text = shown(flags);
        assert!(text.starts_with("[(integer) 1, (integer) 1, "), "{text}");
        assert!(text.ends_with(", (integer) 1, … (84 more)]"), "{text}");
        assert_eq!(text.matches("(integer)").count(), MAX_ELEMENTS);
    }

    #[test]
    fn maps_show_field_and_value() {
        let map: fred::types::Map = [("holder", 2)].try_into().expect("a valid map");
        assert_eq!(shown(Value::Map(map)), "{\"holder\" => (integer) 2}");
    }

    #[test]
    fn optional_values_show_none() {
        assert_eq!(OrNone::<u16>(None).to_string(), "none");
        assert_eq!(OrNone(Some(&7001)).to_string(), "7001");
    }
}
