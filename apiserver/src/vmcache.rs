//! A watch cache of `virtualization.deckhouse.io/v1alpha2` VirtualMachines, for the phase
//! preconditions and `GET virtualmachines/{name}`.

use std::sync::Arc;

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};

use crate::error::{Error, Result};

/// The VirtualMachine resource watched.
pub fn vm_resource() -> ApiResource {
    ApiResource {
        group: "virtualization.deckhouse.io".into(),
        version: "v1alpha2".into(),
        api_version: "virtualization.deckhouse.io/v1alpha2".into(),
        kind: "VirtualMachine".into(),
        plural: "virtualmachines".into(),
    }
}

/// The cache's reader.
#[derive(Clone)]
pub struct VmCache {
    store: Store<DynamicObject>,
    resource: ApiResource,
}

impl std::fmt::Debug for VmCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmCache")
            .field("objects", &self.store.len())
            .finish()
    }
}

impl VmCache {
    /// Starts watching all namespaces (retrying with backoff); returns once the first list is
    /// in.
    pub async fn start(client: kube::Client) -> Result<VmCache> {
        let resource = vm_resource();
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
        tokio::spawn(async move {
            let mut s = std::pin::pin!(stream);
            while let Some(ev) = s.next().await {
                if let Err(e) = ev {
                    tracing::warn!(error = %e, "VirtualMachine watch failed; retrying");
                }
            }
        });
        store
            .wait_until_ready()
            .await
            .map_err(|e| Error::Internal(format!("VirtualMachine cache: {e}")))?;
        Ok(VmCache { store, resource })
    }

    /// The VM, or a 404 naming it.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Arc<DynamicObject>> {
        self.store
            .get(&ObjectRef::new_with(name, self.resource.clone()).within(namespace))
            .ok_or_else(|| Error::NotFound {
                message: format!("virtualmachines.virtualization.deckhouse.io {name:?} not found"),
                kind: "virtualmachines",
                name: name.to_owned(),
            })
    }
}

/// The VM's `status.phase` ("" when it has none).
pub fn phase(vm: &DynamicObject) -> &str {
    vm.data
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(|p| p.as_str())
        .unwrap_or("")
}

/// Checks the VM's phase against the allowed ones: 409 with `message` otherwise.
pub fn check_phase(vm: &DynamicObject, allowed: &[&str], message: &str) -> Result<()> {
    if allowed.contains(&phase(vm)) {
        Ok(())
    } else {
        Err(Error::Conflict(message.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(status: serde_json::Value) -> DynamicObject {
        let mut o = DynamicObject::new("vm1", &vm_resource()).within("ns");
        o.data = json!({ "status": status });
        o
    }

    #[test]
    fn phases() {
        let running = vm(json!({"phase": "Running"}));
        assert_eq!(phase(&running), "Running");
        assert!(check_phase(&running, &["Running"], "x").is_ok());
        let stopped = vm(json!({"phase": "Stopped"}));
        let e = check_phase(
            &stopped,
            &["Running", "Migrating"],
            "VirtualMachine is not Running or Migrating",
        )
        .unwrap_err();
        assert!(matches!(e, Error::Conflict(ref m) if m == "VirtualMachine is not Running or Migrating"));
        assert_eq!(phase(&vm(json!({}))), "");
        assert!(check_phase(&vm(json!(null)), &["Running"], "x").is_err());
    }
}
