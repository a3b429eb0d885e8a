//! The handle's touches, deadlines and sweeps: the heartbeat-vs-timeout core.

use super::*;

impl Store {
    /// A live agent's heartbeat: moves a waiting node's clock and deadline to now (or,
    /// while the store cannot write, remembers it: see [`Touched::recorded`]).
    pub async fn touch_provisioning(&self, uuid: Uuid) -> Result<Touched, StoreError> {
        self.touch(uuid, None).await
    }

    /// A touch that also reports the agent's progress (see
    /// [`super::progress_fingerprint`]).
    pub async fn touch(&self, uuid: Uuid, progress: Option<u64>) -> Result<Touched, StoreError> {
        self.touch_heard(uuid, progress, None, false).await
    }

    /// [`Store::touch`] that keeps what the heartbeat said of its agent where several
    /// engines read it (the shared store; on sled its one engine keeps it in memory). With
    /// `claim`, on the shared store, the touch also claims the node for this engine where
    /// it applies (see [`Touched::claim`]), as [`Store::claim_node`] would: a heartbeat's
    /// step then costs no statement of its own to claim its node.
    pub async fn touch_heard(
        &self,
        uuid: Uuid,
        progress: Option<u64>,
        heard: Option<&AgentHeard>,
        claim: bool,
    ) -> Result<Touched, StoreError> {
        let (provision, recorded, read, new_boot, claim, group) = match &self.backend {
            Backend::Sled(s) => {
                let touched = s.touch(uuid, progress)?;
                (
                    touched.provision,
                    touched.recorded,
                    Read::Sled(touched),
                    None,
                    None,
                    None,
                )
            }
            Backend::Shared(s, membership) => {
                let membership = membership.as_ref().filter(|_| claim);
                let lease = membership.map(|m| m.intend(uuid));
                let touched = s.touch_heard(
                    uuid,
                    progress,
                    heard,
                    lease.as_ref().and_then(|l| l.as_ref().ok()).copied(),
                );
                let row = match Box::pin(touched).await {
                    Ok(row) => row,
                    Err(e) => {
                        // Refused before the statement changed the row (the node does not
                        // wait, or is gone): no claim was taken. Any other error leaves
                        // it unknown, and the claim's release lets go of what was taken.
                        if let (
                            Some(m),
                            StoreError::NotWaiting { .. } | StoreError::NodeNotFound(_),
                        ) = (membership, &e)
                        {
                            m.refused(uuid);
                        }
                        return Err(e);
                    }
                };
                let claim = match (membership, lease, row.claimed) {
                    (Some(_), Some(Ok(_)), Some(Ok(()))) => Some(Ok(())),
                    (Some(m), Some(Ok(lease)), refused) => {
                        m.refused(uuid);
                        let why = refused.and_then(Result::err).unwrap_or(Refusal::Lapsed);
                        Some(Err(why.into_error(uuid, &lease)))
                    }
                    (_, Some(Err(fenced)), _) => Some(Err(fenced)),
                    _ => None,
                };
                let new_boot = heard.map(|_| row.new_boot);
                let group = Some(row.conductor_group);
                (
                    row.provision,
                    true,
                    Read::Shared(row.body),
                    new_boot,
                    claim,
                    group,
                )
            }
        };
        Ok(Touched {
            provision,
            recorded,
            new_boot,
            claim,
            conductor_group: group,
            uuid,
            read,
        })
    }

    /// The node just touched, with its new record, parsed from what the touch read: a
    /// second read of a page just written cost more than the touch and the driver call
    /// together under a storm of heartbeats on sled, as `bench api` measured; on the
    /// shared store it was one more round trip per heartbeat.
    pub async fn touched_node(&self, touched: &Touched) -> Result<Node, StoreError> {
        match &touched.read {
            Read::Sled(read) => read.node(),
            Read::Shared(body) => Ok(Node {
                body: crate::store::parse_body(touched.uuid, body.as_bytes())?,
                provision: touched.provision,
            }),
        }
    }

    /// Whether the store keeps what heartbeats said of their agents (the shared store, whose
    /// nodes any engine reads), rather than each engine in its memory.
    pub fn records_agents(&self) -> bool {
        matches!(self.backend, Backend::Shared(..))
    }

    /// What each of `nodes` last heard from its agent, where the store keeps it (none on
    /// sled).
    pub async fn agents_heard(
        &self,
        nodes: &[Uuid],
    ) -> Result<std::collections::HashMap<Uuid, AgentHeard>, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(Default::default()),
            Backend::Shared(s, _) => Box::pin(s.agents_heard(nodes)).await,
        }
    }

    /// Records progress seen elsewhere than in a heartbeat; returns whether it was progress.
    pub async fn report_progress(&self, uuid: Uuid, progress: u64) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.report_progress(uuid, progress),
            Backend::Shared(s, _) => Box::pin(s.report_progress(uuid, progress)).await,
        }
    }

    /// The earliest deadline in the index (possibly stale; the sweep step checks).
    pub async fn next_deadline(&self) -> Result<Option<Timestamp>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.next_deadline(),
            Backend::Shared(s, _) => Box::pin(s.next_deadline()).await,
        }
    }

    /// The earliest deadline in the index (possibly stale), and how long until it on the
    /// store's own clock (zero if it is due now); `None` when no node waits with one.
    pub async fn next_due(&self) -> Result<Option<(Timestamp, std::time::Duration)>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => Ok(s.next_deadline()?.map(|d| (d, d.since(self.clock.now())))),
            Backend::Shared(s, _) => Box::pin(s.next_due()).await,
        }
    }

    /// What tells a sleeping sweeper that a deadline was filed: this engine's writers on
    /// sled; every engine's transitions, by a notification, on the shared store.
    pub async fn deadlines_filed(&self) -> Result<Filed, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(Filed::Here),
            Backend::Shared(s, _) => Ok(Filed::Notified(s.listen_deadlines().await?)),
        }
    }

    /// Every entry of the deadline index, in deadline order (diagnostics and tests).
    pub async fn deadline_index(&self) -> Result<Vec<(Timestamp, Uuid)>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.deadline_index(),
            Backend::Shared(s, _) => Box::pin(s.deadline_index()).await,
        }
    }

    /// The sweeper's step: fails up to `limit` waiting nodes whose deadline has passed on
    /// the store's own clock (the engine's for sled, the database's for the shared
    /// store), with what each node's agent last reported of its progress (`describe`)
    /// quoted in a stall's `last_error`; returns them.
    pub async fn sweep(
        &self,
        limit: usize,
        describe: &(dyn Fn(Uuid) -> Option<String> + Sync),
    ) -> Result<Vec<TimedOut>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.fail_expired_describing(self.clock.now(), limit, describe),
            Backend::Shared(s, membership) => {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                match membership.as_deref().map(Membership::current) {
                    None => Box::pin(s.fail_expired(limit, None)).await,
                    Some(Some(lease)) => Box::pin(s.fail_expired(limit, Some(&lease))).await,
                    Some(None) => Err(StoreError::Fenced(
                        "this engine is not sure of its lease, so it sweeps nothing".into(),
                    )),
                }
            }
        }
    }

    /// Fails up to `limit` nodes whose deadline is at or before `now`; returns them.
    pub async fn fail_expired(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<TimedOut>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.fail_expired(now, limit),
            Backend::Shared(s, _) => {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                Box::pin(s.fail_expired_at(Some(now), limit, None)).await
            }
        }
    }
}
