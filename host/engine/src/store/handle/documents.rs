//! The handle's documents (chassis, port groups, allocations, …) and uploaded drivers.

use super::*;

impl Store {
    /// A document (a chassis, a port group, an allocation, …) by kind and uuid.
    pub async fn document(&self, kind: &'static str, uuid: Uuid) -> Result<Doc, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs()?.get(kind, uuid),
            Backend::Shared(s, _) => Box::pin(s.document(kind, uuid)).await,
        }
    }

    /// A document by uuid, or by the value of its unique `field` (a name).
    pub async fn find_document(
        &self,
        kind: &'static str,
        field: &str,
        ident: &str,
    ) -> Result<(Uuid, Doc), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs()?.find(kind, field, ident),
            Backend::Shared(s, _) => Box::pin(s.find_document(kind, field, ident)).await,
        }
    }

    /// The documents of a kind after `marker` (all, if none), in uuid order.
    pub fn documents_after(&self, kind: &'static str, marker: Option<Uuid>) -> DocumentPages<'_> {
        match &self.backend {
            Backend::Sled(s) => match s.docs() {
                Ok(docs) => DocumentPages::sled(docs.after(kind, marker)),
                Err(e) => DocumentPages::sled(std::iter::once(Err(e))),
            },
            Backend::Shared(s, _) => DocumentPages::shared(s, kind, marker),
        }
    }

    /// Every document of a kind, in uuid order (kinds an operator keeps a few of).
    pub async fn documents(&self, kind: &'static str) -> Result<Vec<(Uuid, Doc)>, StoreError> {
        let mut pages = self.documents_after(kind, None);
        let mut all = Vec::new();
        while let Some(doc) = pages.next().await {
            all.push(doc?);
        }
        Ok(all)
    }

    /// Adds a document; its uuid and the values of its `unique` fields must be free.
    pub async fn insert_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        doc: &Doc,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs_to_write()?.insert(kind, uuid, doc, unique),
            Backend::Shared(s, _) => Box::pin(s.insert_document(kind, uuid, doc, unique)).await,
        }
    }

    /// Changes a document; `change` may refuse, and then nothing is written.
    pub async fn update_document<E: From<StoreError>>(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
        change: impl FnOnce(&mut Doc) -> Result<(), E>,
    ) -> Result<Doc, E> {
        match &self.backend {
            Backend::Sled(s) => s.docs_to_write()?.update(kind, uuid, unique, change),
            Backend::Shared(s, _) => Box::pin(s.update_document(kind, uuid, unique, change)).await,
        }
    }

    /// Writes a document whose kind has no unique fields, whether or not one was there
    /// (a node's inventory, its image write).
    pub async fn put_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        doc: &Doc,
    ) -> Result<(), StoreError> {
        let replaced = self
            .update_document(kind, uuid, &[], |d: &mut Doc| -> Result<(), StoreError> {
                d.clone_from(doc);
                Ok(())
            })
            .await;
        match replaced {
            Err(StoreError::DocumentNotFound { .. }) => {
                self.insert_document(kind, uuid, doc, &[]).await
            }
            other => other.map(drop),
        }
    }

    /// Deletes a document and frees its unique values.
    pub async fn delete_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs_to_write()?.delete(kind, uuid, unique),
            Backend::Shared(s, _) => Box::pin(s.delete_document(kind, uuid)).await,
        }
    }

    /// Whether the store keeps uploaded driver components itself (the shared store does;
    /// sled's engine keeps them in its plugins directory).
    pub fn keeps_drivers(&self) -> bool {
        matches!(self.backend, Backend::Shared(..))
    }

    /// Keeps `driver` as the active version of its name's uploaded component (an earlier
    /// version stays for the flows pinned to it), where every engine on the store hears
    /// of it ([`Store::drivers_changed`]).
    pub async fn keep_driver(&self, driver: &KeptDriver) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(_) => Err(StoreError::Unsupported {
                backend: "sled",
                operation: "keep a driver (its engine keeps them in the plugins directory)",
            }),
            Backend::Shared(s, _) => Box::pin(s.keep_driver(driver)).await,
        }
    }

    /// Forgets driver `name`'s uploaded component, every version of it (nothing where
    /// none is kept).
    pub async fn forget_driver(&self, name: &str) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(()),
            Backend::Shared(s, _) => Box::pin(s.forget_driver(name)).await,
        }
    }

    /// The uploaded driver components the store keeps, each name's active version (none
    /// on sled).
    pub async fn kept_drivers(&self) -> Result<Vec<KeptDriver>, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(Vec::new()),
            Backend::Shared(s, _) => Box::pin(s.kept_drivers()).await,
        }
    }

    /// Driver `name`'s active uploaded version, if the store keeps one.
    pub async fn kept_driver(&self, name: &str) -> Result<Option<KeptDriver>, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(None),
            Backend::Shared(s, _) => Box::pin(s.kept_driver(name)).await,
        }
    }

    /// An uploaded version by its id, active or not, if the store keeps it.
    pub async fn driver_version(&self, id: &str) -> Result<Option<KeptDriver>, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(None),
            Backend::Shared(s, _) => Box::pin(s.driver_version(id)).await,
        }
    }

    /// The names of drivers uploaded or unloaded on any engine from now on; none on sled
    /// (its one engine is the only one to upload).
    pub async fn drivers_changed(&self) -> Result<Option<Notifications>, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(None),
            Backend::Shared(s, _) => Ok(Some(Box::pin(s.listen_drivers()).await?)),
        }
    }
}
