//! Input limits (ARCHITECTURE.md, "Limits") and the validation that enforces them. Every
//! rejection is `INVALID_ARGUMENT` naming the proto field.

use std::time::Duration;

use super::{Caller, LeaseId, LeaseName, ListPrefix, ValidatedAcquire};
use crate::error::{Error, Result};

/// Longest accepted lease name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest accepted holder description, in bytes.
pub const MAX_HOLDER_BYTES: usize = 256;
/// Longest accepted lease id, in bytes.
pub const MAX_LEASE_ID_BYTES: usize = 128;
/// Shortest lease id a caller may choose (`AcquireRequest.lease_id`): 22 characters of its
/// alphabet hold 128 bits in base64url, the least that cannot be guessed.
pub const MIN_OWN_LEASE_ID_CHARS: usize = 22;

/// A caller's own lease id has at least this many distinct characters. Random ids pass but for
/// odds below 1e-12: 32 hex digits (16 random bytes) have fewer than 6 distinct with odds of
/// about 3e-13, 22 characters of base64url about 3e-18.
pub const MIN_OWN_LEASE_ID_DISTINCT_CHARS: usize = 6;

/// Longest accepted revoke reason, in bytes.
pub const MAX_REASON_BYTES: usize = 256;
/// List's page size when the request leaves it 0.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest page List serves: each listed lease costs the store one read.
pub const MAX_PAGE_SIZE: usize = 1000;
/// Shortest accepted TTL: shorter leases would expire before a round trip completes.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// Longest accepted lock-delay: long enough for any pause a holder can notice, short enough
/// that a dead holder cannot block a name for long.
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

/// The configurable limits of one server.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest TTL a client may ask for (default 24 h).
    pub max_ttl: Duration,
    /// Longest `wait_ms` a client may ask for (default 10 min).
    pub max_wait: Duration,
    /// Most permits a counting lease may have (default 10,000): each taken permit is a record
    /// that every operation on the name may read.
    pub max_limit: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ttl: Duration::from_secs(24 * 3600),
            max_wait: Duration::from_secs(10 * 60),
            max_limit: 10_000,
        }
    }
}

/// The fields of an `Acquire` request, as received.
#[derive(Clone, Debug, Default)]
pub struct AcquireFields<'a> {
    pub name: &'a str,
    pub holder: String,
    pub ttl_ms: i64,
    pub wait_ms: i64,
    pub limit: u32,
    pub lock_delay_ms: i64,
    pub shared: bool,
    /// The caller's own lease id; empty: the server makes one.
    pub lease_id: &'a str,
}

impl Limits {
    /// Validates the fields of an `Acquire` request.
    pub fn validate_acquire(&self, fields: AcquireFields<'_>) -> Result<ValidatedAcquire> {
        let AcquireFields {
            name,
            holder,
            ttl_ms,
            wait_ms,
            limit,
            lock_delay_ms,
            shared,
            lease_id,
        } = fields;
        let name = parse_name(name)?;
        if holder.len() > MAX_HOLDER_BYTES {
            return Err(Error::invalid(
                "holder",
                format!("must be at most {MAX_HOLDER_BYTES} bytes"),
            ));
        }
        refuse_hidden_characters("holder", &holder)?;
        let ttl = self.ttl("ttl_ms", ttl_ms)?;
        let wait = self.wait(wait_ms)?;
        if limit > self.max_limit {
            return Err(Error::invalid(
                "limit",
                format!(
                    "must be at most {} (0 or 1: an exclusive lease), got {limit}",
                    self.max_limit
                ),
            ));
        }
        if shared && limit > 1 {
            return Err(Error::invalid(
                "shared",
                format!(
                    "a counting lease (limit {limit}) has no shared mode: ask for limit 0 or 1 \
                     with shared, or for shared false"
                ),
            ));
        }
        let lease_id = match lease_id {
            "" => None,
            own => Some(parse_own_lease_id(own)?),
        };
        let max_delay_ms = MAX_LOCK_DELAY.as_millis() as i64;
        if !(0..=max_delay_ms).contains(&lock_delay_ms) {
            return Err(Error::invalid(
                "lock_delay_ms",
                format!("must be between 0 and {max_delay_ms} milliseconds, got {lock_delay_ms}"),
            ));
        }
        Ok(ValidatedAcquire {
            name,
            holder,
            ttl,
            wait,
            limit: limit.max(1),
            lock_delay: Duration::from_millis(lock_delay_ms as u64),
            shared,
            max_shared: self.max_limit,
            lease_id,
            caller: Caller::anyone(),
        })
    }

    /// Validates a TTL in milliseconds: from [`MIN_TTL`] to `max_ttl`.
    pub fn ttl(&self, field: &'static str, ttl_ms: i64) -> Result<Duration> {
        let min_ms = MIN_TTL.as_millis() as i64;
        let max_ms = self.max_ttl.as_millis() as i64;
        if !(min_ms..=max_ms).contains(&ttl_ms) {
            return Err(Error::invalid(
                field,
                format!("must be between {min_ms} and {max_ms} milliseconds, got {ttl_ms}"),
            ));
        }
        Ok(Duration::from_millis(ttl_ms as u64))
    }

    /// Validates a renewal TTL: 0 means "keep the granted TTL" (`None`), else as [`Self::ttl`].
    pub fn renew_ttl(&self, ttl_ms: i64) -> Result<Option<Duration>> {
        if ttl_ms == 0 {
            return Ok(None);
        }
        // The message must say that 0 is valid too, or a caller who sent a small TTL reads that
        // the only way out is a TTL of at least the minimum.
        self.ttl("ttl_ms", ttl_ms).map(Some).map_err(|_| {
            let min_ms = MIN_TTL.as_millis();
            let max_ms = self.max_ttl.as_millis();
            Error::invalid(
                "ttl_ms",
                format!(
                    "must be 0 (keep the granted TTL) or between {min_ms} and {max_ms} \
                     milliseconds, got {ttl_ms}"
                ),
            )
        })
    }

    /// Validates `wait_ms`: from 0 to `max_wait`.
    pub fn wait(&self, wait_ms: i64) -> Result<Duration> {
        let max_ms = self.max_wait.as_millis() as i64;
        if !(0..=max_ms).contains(&wait_ms) {
            return Err(Error::invalid(
                "wait_ms",
                format!("must be between 0 and {max_ms} milliseconds, got {wait_ms}"),
            ));
        }
        Ok(Duration::from_millis(wait_ms as u64))
    }
}

/// Validates a lease name: 1 to 256 bytes of `A-Z a-z 0-9 . _ - : / @`.
pub fn parse_name(name: &str) -> Result<LeaseName> {
    if name.is_empty() {
        return Err(Error::invalid("name", "is required"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(
            "name",
            format!("must be at most {MAX_NAME_BYTES} bytes"),
        ));
    }
    if let Some(bad) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(Error::invalid(
            "name",
            format!("may contain only A-Z a-z 0-9 . _ - : / @, found {bad:?}"),
        ));
    }
    Ok(LeaseName(name.to_owned()))
}

/// Validates a lease id sent by a client: non-empty, at most 128 bytes.
pub fn parse_lease_id(lease_id: &str) -> Result<LeaseId> {
    if lease_id.is_empty() {
        return Err(Error::invalid("lease_id", "is required"));
    }
    if lease_id.len() > MAX_LEASE_ID_BYTES {
        return Err(Error::invalid(
            "lease_id",
            format!("must be at most {MAX_LEASE_ID_BYTES} bytes"),
        ));
    }
    Ok(LeaseId(lease_id.to_owned()))
}

/// Validates the lease id a caller chose for its Acquire: 22 to 128 characters of
/// `A-Z a-z 0-9 _ -`. The message never repeats the id: it is the holder's secret.
pub fn parse_own_lease_id(lease_id: &str) -> Result<LeaseId> {
    let length = lease_id.len();
    if !(MIN_OWN_LEASE_ID_CHARS..=MAX_LEASE_ID_BYTES).contains(&length) {
        return Err(Error::invalid(
            "lease_id",
            format!(
                "must be empty (the server makes one) or {MIN_OWN_LEASE_ID_CHARS} to \
                 {MAX_LEASE_ID_BYTES} characters of A-Z a-z 0-9 _ -, got {length} bytes"
            ),
        ));
    }
    if let Some(offset) = lease_id
        .bytes()
        .position(|byte| !(byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'))
    {
        return Err(Error::invalid(
            "lease_id",
            format!("may contain only A-Z a-z 0-9 _ -, found another character at byte {offset}"),
        ));
    }
    // A guessable id would let anyone who guesses it renew or release the grant: refuse the
    // obvious ones (a made-up constant, a counter, a name), which a random id never is.
    let mut distinct = [false; 256];
    let distinct_count = lease_id
        .bytes()
        .filter(|&byte| !std::mem::replace(&mut distinct[usize::from(byte)], true))
        .count();
    if distinct_count < MIN_OWN_LEASE_ID_DISTINCT_CHARS {
        return Err(Error::invalid(
            "lease_id",
            format!(
                "has only {distinct_count} distinct characters, fewer than \
                 {MIN_OWN_LEASE_ID_DISTINCT_CHARS}: make it from at least 128 random bits (e.g. \
                 16 random bytes in base64url or hex)"
            ),
        ));
    }
    Ok(LeaseId(lease_id.to_owned()))
}

/// Validates a List prefix: 0 to 256 bytes of the name alphabet (empty lists every name).
pub fn parse_list_prefix(prefix: &str) -> Result<ListPrefix> {
    if prefix.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(
            "prefix",
            format!("must be at most {MAX_NAME_BYTES} bytes"),
        ));
    }
    if let Some(bad) = prefix.chars().find(|c| !is_name_char(*c)) {
        return Err(Error::invalid(
            "prefix",
            format!("may contain only A-Z a-z 0-9 . _ - : / @, found {bad:?}"),
        ));
    }
    Ok(ListPrefix(prefix.to_owned()))
}

/// Validates List's `page_size`: 0 means [`DEFAULT_PAGE_SIZE`], at most [`MAX_PAGE_SIZE`].
pub fn parse_page_size(page_size: u32) -> Result<usize> {
    match page_size as usize {
        0 => Ok(DEFAULT_PAGE_SIZE),
        size if size > MAX_PAGE_SIZE => Err(Error::invalid(
            "page_size",
            format!("must be at most {MAX_PAGE_SIZE} (0: {DEFAULT_PAGE_SIZE}), got {size}"),
        )),
        size => Ok(size),
    }
}

/// Validates a Revoke reason: required, at most 256 bytes, shown to the revoked holder and
/// written to the log, so without control or bidirectional formatting characters.
pub fn parse_reason(reason: &str) -> Result<&str> {
    if reason.is_empty() {
        return Err(Error::invalid(
            "reason",
            "is required: say why, for the audit log and the revoked holder",
        ));
    }
    if reason.len() > MAX_REASON_BYTES {
        return Err(Error::invalid(
            "reason",
            format!("must be at most {MAX_REASON_BYTES} bytes"),
        ));
    }
    refuse_hidden_characters("reason", reason)?;
    Ok(reason)
}

/// Validates a fencing token to check: tokens start at 1, so 0 is a missing field.
pub fn parse_fencing_token(token: u64) -> Result<u64> {
    match token {
        0 => Err(Error::invalid(
            "fencing_token",
            "is required (the token from Granted)",
        )),
        token => Ok(token),
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/' | '@')
}

/// Characters that free text the server echoes back (a `holder`, in `Describe`, `Waiting` and
/// `NotGranted`) must not contain: a terminal or log viewer that shows it would act on them
/// instead of showing them. Unicode category Cc (C0 such as NUL, ESC and newline; DEL; C1 such
/// as CSI) moves the cursor, recolours or clears the screen; the bidirectional formatting
/// characters reorder the text around them, so that what an operator reads is not what is there.
pub fn is_control_or_bidi(c: char) -> bool {
    c.is_control() || is_bidi_formatting(c)
}

/// The bidirectional formatting characters: ALM, LRM, RLM, the embeddings and overrides
/// (LRE, RLE, PDF, LRO, RLO) and the isolates (LRI, RLI, FSI, PDI).
fn is_bidi_formatting(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Characters that show as nothing, or as a blank, so that two holders that read the same are
/// not: the format characters (Unicode Cf: soft hyphen, zero-width space and joiners, word
/// joiner, BOM, the tag characters...), the line and paragraph separators (Zl, Zp), which break
/// a log line as a newline does, the combining grapheme joiner (U+034F) and the Hangul fillers
/// (U+115F, U+1160, U+3164, U+FFA0), which are letters that draw a blank. `char` has no general
/// category, and a table this small is cheaper than a dependency: the Cf ranges are those of
/// Unicode 16's DerivedGeneralCategory.txt (the bidirectional ones, also Cf, are refused above
/// under their own name), and the whole tag block U+E0000 to U+E007F (unassigned ones included).
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        // Cf.
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}'
            // Zl, Zp.
            | '\u{2028}'
            | '\u{2029}'
            // Not Cf, but invisible or a blank.
            | '\u{034F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{3164}'
            | '\u{FFA0}'
    )
}

/// Whether free text the server echoes back (a `holder`, a Revoke `reason`) may not contain `c`:
/// a control, bidirectional formatting or invisible character.
pub fn is_hidden(c: char) -> bool {
    is_control_or_bidi(c) || is_invisible(c)
}

/// Refuses `text` if it contains an [`is_hidden`] character, saying which kind and which
/// character (escaped, so the error itself is safe to print) and at which byte.
fn refuse_hidden_characters(field: &'static str, text: &str) -> Result<()> {
    let Some((at, bad)) = text.char_indices().find(|(_, c)| is_hidden(*c)) else {
        return Ok(());
    };
    let kind = if bad.is_control() {
        "control characters"
    } else if is_bidi_formatting(bad) {
        "bidirectional formatting characters"
    } else {
        "invisible or blank formatting characters"
    };
    Err(Error::invalid(
        field,
        format!(
            "must not contain {kind}, found '{}' at byte {at}",
            bad.escape_unicode()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_and_revoke_fields_name_themselves_when_refused() {
        assert_eq!(parse_list_prefix("").unwrap().as_str(), "");
        assert!(parse_list_prefix("jobs/").is_ok());
        let field = |error: Error| match error {
            Error::InvalidArgument { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(parse_list_prefix("jobs/*").unwrap_err()), "prefix");
        assert_eq!(
            field(parse_list_prefix(&"a".repeat(257)).unwrap_err()),
            "prefix"
        );
        assert_eq!(parse_page_size(0).unwrap(), DEFAULT_PAGE_SIZE);
        assert_eq!(parse_page_size(1000).unwrap(), 1000);
        assert_eq!(field(parse_page_size(1001).unwrap_err()), "page_size");
        assert_eq!(field(parse_reason("").unwrap_err()), "reason");
        assert_eq!(field(parse_reason("wedged\x1b[2J").unwrap_err()), "reason");
        assert_eq!(field(parse_reason(&"r".repeat(257)).unwrap_err()), "reason");
        assert!(parse_reason("holder wedged, INC-42").is_ok());
        assert_eq!(field(parse_fencing_token(0).unwrap_err()), "fencing_token");
    }

    #[test]
    fn names_accept_the_documented_alphabet_only() {
        assert!(parse_name("jobs/nightly-backup@eu:v1.2_x").is_ok());
        assert!(parse_name(&"a".repeat(256)).is_ok());
        for bad in ["", "has space", "curly{}", "ünï", &"a".repeat(257)] {
            let err = parse_name(bad).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid name"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn ttl_and_wait_bounds_are_inclusive() {
        let limits = Limits::default();
        assert!(limits.ttl("ttl_ms", 10).is_ok());
        assert!(limits.ttl("ttl_ms", 86_400_000).is_ok());
        assert!(limits.ttl("ttl_ms", 9).is_err());
        assert!(limits.ttl("ttl_ms", 86_400_001).is_err());
        assert!(limits.wait(0).is_ok());
        assert!(limits.wait(600_000).is_ok());
        assert!(limits.wait(-1).is_err());
        assert!(limits.wait(600_001).is_err());
        assert_eq!(limits.renew_ttl(0).unwrap(), None);
    }

    #[test]
    fn renew_ttl_message_says_that_zero_keeps_the_granted_ttl() {
        let limits = Limits::default();
        assert_eq!(limits.renew_ttl(10).unwrap(), Some(MIN_TTL));
        for bad in [5, -1, 86_400_001] {
            assert_eq!(
                limits.renew_ttl(bad).unwrap_err().to_string(),
                format!(
                    "invalid ttl_ms: must be 0 (keep the granted TTL) or between 10 and 86400000 \
                     milliseconds, got {bad}"
                )
            );
        }
        // Acquire has no "keep": its message does not offer 0.
        let acquire = limits.ttl("ttl_ms", 0).unwrap_err().to_string();
        assert!(!acquire.contains("keep"), "{acquire}");
    }

    fn holder_error(holder: &str) -> String {
        Limits::default()
            .validate_acquire(AcquireFields {
                name: "a",
                holder: holder.to_owned(),
                ttl_ms: 1_000,
                ..AcquireFields::default()
            })
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn holders_refuse_control_characters_saying_which_and_where() {
        assert_eq!(
            holder_error("abc\u{1b}[2J"),
            "invalid holder: must not contain control characters, found '\\u{1b}' at byte 3"
        );
        assert_eq!(
            holder_error("ünï\n"),
            "invalid holder: must not contain control characters, found '\\u{a}' at byte 5"
        );
        for control in ['\0', '\t', '\r', '\u{7f}', '\u{80}', '\u{9b}', '\u{9f}'] {
            let error = holder_error(&format!("host-a{control}"));
            assert!(
                error.starts_with("invalid holder: must not contain control"),
                "{error}"
            );
            assert!(error.ends_with("at byte 6"), "{error}");
        }
    }

    #[test]
    fn holders_refuse_bidirectional_formatting_characters() {
        let bidi = ['\u{061C}', '\u{200E}', '\u{200F}']
            .into_iter()
            .chain('\u{202A}'..='\u{202E}')
            .chain('\u{2066}'..='\u{2069}');
        for c in bidi {
            let error = holder_error(&format!("x{c}y"));
            let expected = format!(
                "invalid holder: must not contain bidirectional formatting characters, \
                 found '{}' at byte 1",
                c.escape_unicode()
            );
            assert_eq!(error, expected);
        }
    }

    /// Every invisible or blank character of the rule (Cf, Zl, Zp, the tag block, U+034F and
    /// the Hangul fillers) is refused, naming the field, the character and its byte offset.
    #[test]
    fn holders_refuse_invisible_and_blank_characters() {
        let listed = [
            '\u{00AD}', '\u{061C}', '\u{06DD}', '\u{070F}', '\u{08E2}', '\u{180E}',
        ]
        .into_iter()
        .chain('\u{0600}'..='\u{0605}')
        .chain('\u{0890}'..='\u{0891}')
        .chain('\u{200B}'..='\u{200F}')
        .chain('\u{202A}'..='\u{202E}')
        .chain('\u{2060}'..='\u{2064}')
        .chain('\u{2066}'..='\u{206F}')
        .chain(['\u{FEFF}', '\u{110BD}', '\u{110CD}'])
        .chain('\u{FFF9}'..='\u{FFFB}')
        .chain('\u{13430}'..='\u{1343F}')
        .chain('\u{1BCA0}'..='\u{1BCA3}')
        .chain('\u{1D173}'..='\u{1D17A}')
        .chain('\u{E0000}'..='\u{E007F}')
        .chain(['\u{2028}', '\u{2029}'])
        .chain(['\u{034F}', '\u{115F}', '\u{1160}', '\u{3164}', '\u{FFA0}']);
        let mut refused = 0;
        for c in listed {
            let error = holder_error(&format!("ab{c}"));
            assert!(
                error.starts_with("invalid holder: must not contain "),
                "{error}"
            );
            assert!(
                error.ends_with(&format!("found '{}' at byte 2", c.escape_unicode())),
                "{error}"
            );
            refused += 1;
        }
        // 16 single characters and ranges of 6, 2, 5, 5, 5, 10, 3, 16, 4, 8 and 128.
        assert_eq!(refused, 16 + 6 + 2 + 5 + 5 + 5 + 10 + 3 + 16 + 4 + 8 + 128);
        assert_eq!(
            holder_error("host\u{200B}a"),
            "invalid holder: must not contain invisible or blank formatting characters, \
             found '\\u{200b}' at byte 4"
        );
        // A revoke reason, shown to the revoked holder, follows the same rule.
        let reason = parse_reason("wedged\u{2028}forged: line").unwrap_err();
        assert!(
            reason
                .to_string()
                .starts_with("invalid reason: must not contain invisible")
        );
    }

    #[test]
    fn holders_keep_any_other_text() {
        let limits = Limits::default();
        // Neighbours of the refused ranges, emoji, right-to-left script and visible spaces are
        // text: accepted as they are.
        for holder in [
            "",
            "host-a/pid-42",
            "ünïcödé 漢字 🦀",
            "עברית العربية",
            "a\u{00A0}b\u{202F}c\u{3000}d",
            "\u{AC}\u{AE}\u{34E}\u{350}\u{2027}\u{202F}\u{2065}\u{061B}\u{061D}\u{3163}\u{3165}",
            "\u{FEFE}\u{FF00}\u{FFF8}\u{FFFC}\u{1D172}\u{1D17B}\u{DFFFF}\u{E0080}",
            "~ \\ \"'",
        ] {
            let request = limits
                .validate_acquire(AcquireFields {
                    name: "a",
                    holder: holder.to_owned(),
                    ttl_ms: 1_000,
                    ..AcquireFields::default()
                })
                .unwrap_or_else(|error| panic!("{holder:?}: {error}"));
            assert_eq!(request.holder, holder);
        }
    }

    #[test]
    fn lease_ids_are_bounded_and_never_printed() {
        assert!(parse_lease_id("").is_err());
        assert!(parse_lease_id(&"x".repeat(129)).is_err());
        let id = LeaseId::generate();
        assert_eq!(id.expose().len(), 32);
        assert!(
            id.expose()
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        );
        assert_ne!(id, LeaseId::generate());
        assert!(!format!("{id:?}").contains(id.expose()));
        assert_eq!(id.to_string(), "<redacted>");
    }

    #[test]
    fn an_own_lease_id_is_22_to_128_characters_of_its_alphabet_not_guessable_and_never_echoed() {
        let acquire = |lease_id: &str, shared: bool, limit: u32| {
            Limits::default().validate_acquire(AcquireFields {
                name: "n",
                ttl_ms: 1000,
                lease_id,
                shared,
                limit,
                ..AcquireFields::default()
            })
        };
        let fine = "Ab0_-9".repeat(4); // 24 characters, 6 distinct
        assert!(acquire(&fine, false, 0).unwrap().lease_id.is_some());
        assert!(acquire("", false, 0).unwrap().lease_id.is_none());
        assert!(acquire(&"Ab0_-9".repeat(128)[..128], false, 0).is_ok());
        for bad in [
            "Ab0_-9".repeat(4)[..21].to_owned(),
            "Ab0_-9".repeat(22)[..129].to_owned(),
            // Guessable: fewer than 6 distinct characters.
            "a".repeat(22),
            "Ab0_-".repeat(5),
            format!("{}!", "a".repeat(30)),
            format!("{}é", "a".repeat(30)),
            format!("{} x", "secret".repeat(5)),
        ] {
            let error = acquire(&bad, false, 0).unwrap_err().to_string();
            assert!(error.contains("lease_id"), "{error}");
            assert!(!error.contains(&bad), "the id is echoed: {error}");
        }
        assert!(acquire("", true, 1).unwrap().shared);
        let error = acquire("", true, 3).unwrap_err().to_string();
        assert!(error.contains("shared"), "{error}");
    }
}
