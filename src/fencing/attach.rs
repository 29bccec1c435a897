//! The caller's side of the metadata convention: what a call to a fenced service carries.

use tonic::metadata::{AsciiMetadataValue, MetadataMap};

use super::metadata::{FENCING_TOKEN, LEASE_NAME};

/// The fencing metadata of one grant: `leased-lease-name` and `leased-fencing-token`.
///
/// As a tonic interceptor it adds them to every call of a client, for a client used under one
/// grant (`FooClient::with_interceptor(channel, guard.fencing_interceptor())`); for single calls,
/// [`LeaseGuard::fenced_request`](crate::client::LeaseGuard::fenced_request) is simpler.
#[derive(Clone, Debug)]
pub struct FencingInterceptor {
    name: AsciiMetadataValue,
    token: AsciiMetadataValue,
}

impl FencingInterceptor {
    /// The metadata of the grant of `name` with fencing token `token`.
    ///
    /// Panics if `name` cannot be a metadata value (a control character, say): leased grants
    /// only names of `A-Z a-z 0-9 . _ - : / @`.
    pub fn new(name: &str, token: u64) -> Self {
        FencingInterceptor {
            name: name
                .parse()
                .unwrap_or_else(|_| panic!("lease name {name:?} is not a valid metadata value")),
            token: AsciiMetadataValue::from(token),
        }
    }

    /// Adds (or replaces) both entries in `metadata`.
    pub fn attach(&self, metadata: &mut MetadataMap) {
        metadata.insert(LEASE_NAME, self.name.clone());
        metadata.insert(FENCING_TOKEN, self.token.clone());
    }

    /// Both entries, in a map of their own.
    pub fn metadata(&self) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        self.attach(&mut metadata);
        metadata
    }
}

impl tonic::service::Interceptor for FencingInterceptor {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        self.attach(request.metadata_mut());
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor;

    use super::*;

    #[test]
    fn the_interceptor_attaches_the_name_and_the_token_in_decimal() {
        let mut interceptor = FencingInterceptor::new("jobs/nightly", 9_223_372_036_854_775_807);
        let request = interceptor.call(tonic::Request::new(())).unwrap();
        let metadata = request.metadata();
        assert_eq!(metadata.get(LEASE_NAME).unwrap(), "jobs/nightly");
        assert_eq!(metadata.get(FENCING_TOKEN).unwrap(), "9223372036854775807");
        assert_eq!(interceptor.metadata().len(), 2);
    }
}
