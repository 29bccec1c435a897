//! The client certificate of an mTLS connection, as the audit log of Revoke names its caller.
//!
//! Whoever asked the CA for a certificate chose its subject and names, so nothing of them reaches
//! the log raw: a common name of `mallory, CN=ops-alice` must not read as Alice, a newline must
//! not start a forged line, and an empty subject must not name nobody. The caller is named by
//! the certificate's first subject alternative name (DNS name, URI or email, what a CA checks),
//! else by its subject as an RFC 4514 string; both are escaped as RFC 4514 escapes a value, and
//! every character outside printable ASCII is written as `\XX` hex escapes of its UTF-8 bytes
//! (RFC 4514's hexpair), so the name is one line of plain ASCII whatever the certificate holds.
//! The certificate's SHA-256 fingerprint says which certificate it was.

use x509_parser::{
    asn1_rs::{Any, Tag, ToDer},
    certificate::X509Certificate,
    extensions::GeneralName,
    x509::{AttributeTypeAndValue, X509Name},
};

use crate::lease::{hex, sha256_hex};

/// How many hex digits of the certificate's SHA-256 the audit log shows: 16 (64 bits) tell the
/// certificates of one CA apart and find the certificate in the CA's records.
pub const FINGERPRINT_HEX_DIGITS: usize = 16;

/// What the audit log shows for a certificate with neither a usable SAN nor a subject.
pub const EMPTY_SUBJECT: &str = "(empty subject)";

/// What it shows for a certificate rustls accepted but x509-parser cannot read.
const UNREADABLE: &str = "(unreadable certificate)";

/// The client certificate of an mTLS connection (already verified by rustls against the client
/// CA), as the audit log names its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCertificate {
    /// `san:dns:NAME`, `san:uri:URI` or `san:email:ADDRESS` for the certificate's first such
    /// subject alternative name, else its subject as an RFC 4514 string (e.g. `CN=ops-alice`),
    /// else [`EMPTY_SUBJECT`]; escaped, one line of printable ASCII, never empty.
    pub name: String,
    /// The first [`FINGERPRINT_HEX_DIGITS`] lowercase hex digits of the SHA-256 of the
    /// certificate's DER encoding (`openssl x509 -fingerprint -sha256` shows all of them).
    pub sha256: String,
}

impl PeerCertificate {
    /// The name and fingerprint of a DER certificate.
    pub(super) fn of(der: &[u8]) -> Self {
        let name = match x509_parser::parse_x509_certificate(der) {
            Ok((_, certificate)) => caller_name(&certificate),
            Err(_) => UNREADABLE.to_owned(),
        };
        PeerCertificate {
            name,
            sha256: fingerprint(der),
        }
    }
}

/// The first SAN, else the subject, else [`EMPTY_SUBJECT`].
fn caller_name(certificate: &X509Certificate<'_>) -> String {
    if let Some(san) = first_san(certificate) {
        return san;
    }
    let subject = rfc4514(certificate.subject());
    if subject.is_empty() {
        EMPTY_SUBJECT.to_owned()
    } else {
        subject
    }
}

/// `san:KIND:VALUE` for the first non-empty DNS name, URI or email among the certificate's
/// subject alternative names (none if the extension is missing, repeated or malformed).
fn first_san(certificate: &X509Certificate<'_>) -> Option<String> {
    let extension = certificate.subject_alternative_name().ok().flatten()?;
    extension
        .value
        .general_names
        .iter()
        .find_map(|general_name| {
            let (kind, value) = match general_name {
                GeneralName::DNSName(value) => ("dns", value),
                GeneralName::URI(value) => ("uri", value),
                GeneralName::RFC822Name(value) => ("email", value),
                _ => return None,
            };
            (!value.is_empty()).then(|| format!("san:{kind}:{}", escape_value(value)))
        })
}

/// A name as RFC 4514 writes it: the RDNs last first, separated by `,`; the attributes of a
/// multi-valued RDN separated by `+`; `TYPE=value` with a registered short name and a string
/// value, else `OID=#hex` of the value's DER encoding (RFC 4514, 2.4). Empty for an empty name.
fn rfc4514(name: &X509Name<'_>) -> String {
    let mut rdns: Vec<String> = name
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    rdns.reverse();
    rdns.join(",")
}

/// The short names RFC 4514 (section 3) lists, and a few more registered ones that client
/// certificates use.
const SHORT_NAMES: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.6", "C"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
    ("2.5.4.4", "SN"),
    ("2.5.4.5", "serialNumber"),
    ("2.5.4.12", "title"),
    ("2.5.4.42", "GN"),
    ("1.2.840.113549.1.9.1", "emailAddress"),
];

fn attribute(attribute: &AttributeTypeAndValue<'_>) -> String {
    let oid = attribute.attr_type().to_id_string();
    let short_name = SHORT_NAMES
        .iter()
        .find(|(known, _)| *known == oid)
        .map(|(_, short_name)| *short_name);
    match (short_name, string_value(attribute.attr_value())) {
        (Some(short_name), Some(value)) => format!("{short_name}={}", escape_value(&value)),
        _ => {
            let der = attribute.attr_value().to_der_vec().unwrap_or_default();
            format!("{oid}=#{}", hex(&der))
        }
    }
}

/// The text of a string value: the ASCII and UTF-8 string types, BMPString (UTF-16BE) and
/// UniversalString (UTF-32BE); none for any other type or a malformed value.
fn string_value(value: &Any<'_>) -> Option<String> {
    let data = value.data;
    match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::NumericString
        | Tag::VisibleString => std::str::from_utf8(data).ok().map(str::to_owned),
        Tag::BmpString if data.len().is_multiple_of(2) => char::decode_utf16(
            data.chunks_exact(2)
                .map(|unit| u16::from_be_bytes([unit[0], unit[1]])),
        )
        .collect::<Result<String, _>>()
        .ok(),
        Tag::UniversalString if data.len().is_multiple_of(4) => data
            .chunks_exact(4)
            .map(|unit| char::from_u32(u32::from_be_bytes([unit[0], unit[1], unit[2], unit[3]])))
            .collect(),
        _ => None,
    }
}

/// An attribute value escaped as RFC 4514 (section 2.4) escapes it: `"`, `+`, `,`, `;`, `<`,
/// `>` and `\` anywhere, `#` and space at the start and space at the end with a backslash; and
/// every character outside printable ASCII (controls, DEL, all of Unicode past ASCII: no
/// newline, terminal escape, bidirectional override or look-alike letter gets through) as `\XX`
/// hex escapes of its UTF-8 bytes.
fn escape_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (index, character) in value.chars().enumerate() {
        match character {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                escaped.push('\\');
                escaped.push(character);
            }
            '#' if index == 0 => escaped.push_str("\\#"),
            ' ' if index == 0 || index == last => escaped.push_str("\\ "),
            ' '..='~' => escaped.push(character),
            _ => {
                let mut utf8 = [0; 4];
                for byte in character.encode_utf8(&mut utf8).bytes() {
                    escaped.push_str(&format!("\\{byte:02X}"));
                }
            }
        }
    }
    escaped
}

/// The first [`FINGERPRINT_HEX_DIGITS`] hex digits of the SHA-256 of `der`.
fn fingerprint(der: &[u8]) -> String {
    sha256_hex(der, FINGERPRINT_HEX_DIGITS)
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

    use super::*;

    #[test]
    fn a_comma_in_a_common_name_cannot_pose_as_another_attribute() {
        assert_eq!(
            escape_value("mallory, CN=ops-alice"),
            "mallory\\, CN=ops-alice"
        );
    }

    #[test]
    fn a_newline_or_any_control_character_becomes_a_hex_escape() {
        assert_eq!(
            escape_value("mallory\nFAKE audit line"),
            "mallory\\0AFAKE audit line"
        );
        assert_eq!(
            escape_value("a\r\0\u{1b}[31m\u{7f}"),
            "a\\0D\\00\\1B[31m\\7F"
        );
        // Line and paragraph separators, a right-to-left override and a look-alike letter.
        assert_eq!(
            escape_value("\u{2028}\u{202e}\u{430}"),
            "\\E2\\80\\A8\\E2\\80\\AE\\D0\\B0"
        );
    }

    #[test]
    fn special_characters_are_escaped_with_a_backslash() {
        assert_eq!(
            escape_value(r#"a"b+c;d<e>f\g=h"#),
            r#"a\"b\+c\;d\<e\>f\\g=h"#
        );
    }

    #[test]
    fn a_leading_hash_and_leading_or_trailing_spaces_are_escaped() {
        assert_eq!(escape_value("#ops"), "\\#ops");
        assert_eq!(escape_value("a#b"), "a#b");
        assert_eq!(escape_value(" ops alice "), "\\ ops alice\\ ");
        assert_eq!(escape_value(" "), "\\ ");
        assert_eq!(escape_value(""), "");
    }

    /// The escaped text is one line of printable ASCII whatever the input.
    #[test]
    fn the_escaped_text_is_always_printable_ascii() {
        let all: String = (0..=0x10ffff_u32).filter_map(char::from_u32).collect();
        let escaped = escape_value(&all);
        assert!(escaped.bytes().all(|byte| (b' '..=b'~').contains(&byte)));
    }

    fn certificate(distinguished_name: DistinguishedName, sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = distinguished_name;
        params.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn common_name(name: &str) -> DistinguishedName {
        let mut distinguished_name = DistinguishedName::new();
        distinguished_name.push(DnType::CommonName, name);
        distinguished_name
    }

    #[test]
    fn without_a_san_the_caller_is_the_escaped_subject() {
        let der = certificate(common_name("mallory, CN=ops-alice\nFAKE"), Vec::new());
        let peer = PeerCertificate::of(&der);
        assert_eq!(peer.name, "CN=mallory\\, CN=ops-alice\\0AFAKE");
    }

    #[test]
    fn an_empty_subject_is_named_as_such() {
        let der = certificate(DistinguishedName::new(), Vec::new());
        assert_eq!(PeerCertificate::of(&der).name, EMPTY_SUBJECT);
    }

    #[test]
    fn the_subject_is_written_last_rdn_first() {
        let mut distinguished_name = DistinguishedName::new();
        distinguished_name.push(DnType::CountryName, "DE");
        distinguished_name.push(DnType::OrganizationName, "Acme; Inc.");
        distinguished_name.push(DnType::CommonName, "#ops-alice ");
        let der = certificate(distinguished_name, Vec::new());
        assert_eq!(
            PeerCertificate::of(&der).name,
            "CN=\\#ops-alice\\ ,O=Acme\\; Inc.,C=DE"
        );
    }

    #[test]
    fn an_attribute_without_a_short_name_is_its_oid_and_hex() {
        let mut distinguished_name = DistinguishedName::new();
        distinguished_name.push(
            DnType::CustomDnType(vec![1, 3, 6, 1, 4, 1, 99999, 1]),
            "x\n",
        );
        let der = certificate(distinguished_name, Vec::new());
        // The DER of UTF8String "x\n": tag 0x0c, length 2, then the bytes.
        assert_eq!(
            PeerCertificate::of(&der).name,
            "1.3.6.1.4.1.99999.1=#0c02780a"
        );
    }

    #[test]
    fn the_first_dns_uri_or_email_san_names_the_caller() {
        let der = certificate(
            common_name("ops-alice"),
            vec![
                SanType::IpAddress([127, 0, 0, 1].into()),
                SanType::DnsName("ops-alice.example".try_into().unwrap()),
                SanType::Rfc822Name("alice@example.com".try_into().unwrap()),
            ],
        );
        assert_eq!(PeerCertificate::of(&der).name, "san:dns:ops-alice.example");

        let der = certificate(
            common_name("ops-alice"),
            vec![SanType::URI(
                "spiffe://example.org/ns/ops/sa/alice,x".try_into().unwrap(),
            )],
        );
        assert_eq!(
            PeerCertificate::of(&der).name,
            "san:uri:spiffe://example.org/ns/ops/sa/alice\\,x"
        );

        let der = certificate(
            DistinguishedName::new(),
            vec![SanType::Rfc822Name(
                "alice@example.com\nFAKE".try_into().unwrap(),
            )],
        );
        assert_eq!(
            PeerCertificate::of(&der).name,
            "san:email:alice@example.com\\0AFAKE"
        );
    }

    #[test]
    fn the_fingerprint_is_the_start_of_the_sha256_of_the_der() {
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(fingerprint(b"abc"), "ba7816bf8f01cfea");
        let der = certificate(common_name("ops-alice"), Vec::new());
        let peer = PeerCertificate::of(&der);
        assert_eq!(peer.sha256.len(), FINGERPRINT_HEX_DIGITS);
        assert_eq!(peer.sha256, fingerprint(&der));
    }

    #[test]
    fn an_unreadable_certificate_is_still_named() {
        let peer = PeerCertificate::of(b"not a certificate");
        assert_eq!(peer.name, UNREADABLE);
        assert_eq!(peer.sha256.len(), FINGERPRINT_HEX_DIGITS);
    }
}
