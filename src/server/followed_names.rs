//! The distinct lease names that this server's open Watch streams and waiting Acquires follow.
//! Each costs the replica a subscription to the name's changes (on Redis a shard channel, and
//! the watch or queue state kept for it), however many callers share it; the per-name limits
//! (`--max-waiters-per-name`) do not bound how many names there are. So the names followed are
//! bounded for the replica (`--max-followed-names`) and for each token
//! (`--max-followed-names-per-token`, when access control is on): past either, a call that would
//! follow one more name answers `RESOURCE_EXHAUSTED`; names already followed take more callers.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use crate::{
    error::{Error, Result},
    lease::{LeaseName, Refusal},
};

/// The bounds on followed names.
#[derive(Clone, Copy, Debug)]
pub struct FollowLimits {
    /// Distinct names followed on this replica.
    pub per_replica: usize,
    /// Distinct names followed by the calls of one token.
    pub per_token: usize,
}

impl Default for FollowLimits {
    fn default() -> Self {
        FollowLimits {
            per_replica: 20_000,
            per_token: 5_000,
        }
    }
}

/// The names followed now, counted by their callers, for the replica and for each token.
#[derive(Default)]
pub struct FollowedNames {
    limits: FollowLimits,
    followed: Mutex<Followed>,
}

#[derive(Default)]
struct Followed {
    /// Callers following each name.
    by_name: HashMap<Arc<str>, usize>,
    /// Each token's callers following each name; a token without any is removed.
    by_token: HashMap<Arc<str>, HashMap<Arc<str>, usize>>,
}

impl FollowedNames {
    pub fn new(limits: FollowLimits) -> Arc<Self> {
        Arc::new(FollowedNames {
            limits,
            followed: Mutex::default(),
        })
    }

    /// One more caller follows `name`, for `token` (`None`: access control is off), or
    /// `RESOURCE_EXHAUSTED` if that would follow one name more than a bound allows. The caller
    /// follows it until the returned guard is dropped.
    pub fn follow(
        self: &Arc<Self>,
        token: Option<Arc<str>>,
        name: &LeaseName,
    ) -> Result<Following> {
        let mut followed = self.lock();
        let Followed { by_name, by_token } = &mut *followed;
        let name: Arc<str> = match by_name.get_key_value(name.as_str()) {
            Some((key, _)) => key.clone(),
            None if by_name.len() >= self.limits.per_replica => {
                return Err(Error::Refused(Refusal::TooManyFollowedNames {
                    followed: by_name.len(),
                }));
            }
            None => Arc::from(name.as_str()),
        };
        if let Some(token) = &token {
            let names = by_token.get(token);
            let follows = names.is_some_and(|names| names.contains_key(&name));
            let count = names.map_or(0, HashMap::len);
            if !follows && count >= self.limits.per_token {
                return Err(Error::Refused(Refusal::TooManyFollowedNamesForToken {
                    followed: count,
                }));
            }
            *by_token
                .entry(token.clone())
                .or_default()
                .entry(name.clone())
                .or_default() += 1;
        }
        *by_name.entry(name.clone()).or_default() += 1;
        Ok(Following {
            names: self.clone(),
            token,
            name,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Followed> {
        self.followed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Distinct names followed now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_name.len()
    }
}

/// One caller's following of a name; dropped when its call ends.
pub struct Following {
    names: Arc<FollowedNames>,
    token: Option<Arc<str>>,
    name: Arc<str>,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut followed = self.names.lock();
        let Followed { by_name, by_token } = &mut *followed;
        forget(by_name, &self.name);
        if let Some(token) = &self.token
            && let Some(names) = by_token.get_mut(token)
        {
            forget(names, &self.name);
            if names.is_empty() {
                by_token.remove(token);
            }
        }
    }
}

/// One caller fewer follows `name`; the name is forgotten with its last.
fn forget(counts: &mut HashMap<Arc<str>, usize>, name: &str) {
    if let Some(count) = counts.get_mut(name) {
        *count -= 1;
        if *count == 0 {
            counts.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::limits::parse_name;

    /// New names past a bound are refused; more callers of a name already followed are not;
    /// a name is forgotten with its last caller, making room again.
    #[test]
    fn names_are_bounded_per_replica_and_per_token() {
        let names = FollowedNames::new(FollowLimits {
            per_replica: 3,
            per_token: 2,
        });
        let name = |text: &str| parse_name(text).unwrap();
        let alice: Option<Arc<str>> = Some("alice-token".into());
        let bob: Option<Arc<str>> = Some("bob-token".into());

        let a1 = names.follow(alice.clone(), &name("a/1")).unwrap();
        let a2 = names.follow(alice.clone(), &name("a/2")).unwrap();
        let again = names.follow(alice.clone(), &name("a/1")).unwrap();
        let refused = names.follow(alice.clone(), &name("a/3")).err().unwrap();
        assert!(
            matches!(
                refused,
                Error::Refused(Refusal::TooManyFollowedNamesForToken { followed: 2 })
            ),
            "{refused:?}"
        );

        let b1 = names.follow(bob.clone(), &name("b/1")).unwrap();
        assert_eq!(names.len(), 3);
        let full = names.follow(bob.clone(), &name("b/2")).err().unwrap();
        assert!(
            matches!(
                full,
                Error::Refused(Refusal::TooManyFollowedNames { followed: 3 })
            ),
            "{full:?}"
        );
        // A name followed already takes another token's caller, and anyone's without auth.
        let shared = names.follow(bob.clone(), &name("a/2")).unwrap();
        let open = names.follow(None, &name("b/1")).unwrap();

        drop(a1);
        let a3 = names.follow(alice.clone(), &name("a/3"));
        assert!(a3.is_err(), "a/1 is still followed by another caller");
        drop(again);
        let a3 = names.follow(alice.clone(), &name("a/3")).unwrap();
        drop((a2, a3, b1, shared, open));
        assert_eq!(names.len(), 0);
        assert!(names.lock().by_token.is_empty());
    }
}
