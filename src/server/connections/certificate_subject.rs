//! The subject of an mTLS client's certificate, which the audit log names.

use std::sync::Arc;

/// The subject of a DER certificate (already verified by rustls against the client CA).
pub(super) fn certificate_subject(der: &[u8]) -> Option<Arc<str>> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(certificate.subject().to_string().into())
}
