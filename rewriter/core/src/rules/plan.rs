//! Plans: the field locations of a kind compiled into a tree the walker follows in one pass.

use std::collections::HashMap;
use std::sync::Arc;

use crate::rules::jsonpath::Segment;
use crate::rules::{FieldType, Rules};
use crate::short_eq;

/// Which rename rules apply to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// Label rules.
    Labels,
    /// Annotation rules.
    Annotations,
    /// Finalizer rules.
    Finalizers,
}

/// How the `apiVersion`/`kind` pair of an object is spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gvk {
    /// `apiVersion: group/version` and `kind`.
    ApiVersionKind,
    /// `apiGroup: group` and `kind`.
    ApiGroupKind,
}

/// Something the walker rewrites as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leaf {
    /// A map of names to values (labels, annotations, selectors).
    Names(Which),
    /// A list of names (finalizers, label keys).
    NameList(Which),
    /// One name.
    Name(Which),
    /// One selector requirement `{key, operator, values}`.
    Requirement,
    /// `group/version`.
    ApiVersion,
    /// A group.
    ApiGroup,
    /// An RBAC or admission rule (`apiGroups` + `resources`).
    PolicyRule,
    /// `resourceAttributes` of an access review.
    ResourceAttributes,
    /// An object dispatched by its own kind.
    Embedded,
    /// `fieldsV1` keys `f:<name>` naming labels or annotations.
    FieldsKeys(Which),
    /// `fieldsV1` keys `v:"<name>"` naming finalizers.
    FieldsValues(Which),
    /// A CRD's `metadata.name` (`plural.group`).
    CrdName,
    /// A CRD's `spec.group`.
    CrdGroup,
    /// A CRD's `spec.names` or `status.acceptedNames`.
    CrdNames,
    /// `{group, version, kind}` of admission reviews.
    GroupVersionKind,
    /// An admission response's base64 JSON patch.
    AdmissionPatch,
}

/// A node of a plan.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    /// An object (or, through `any`, an array) with rewritten parts.
    Obj(Box<ObjNode>),
    /// A value rewritten as a whole.
    Leaf(Leaf),
}

/// The rewritten parts of an object.
#[derive(Debug, Clone, Default)]
pub(crate) struct ObjNode {
    /// Members by name.
    pub(crate) fields: Vec<(String, Node)>,
    /// Every member (objects) or element (arrays).
    pub(crate) any: Option<Node>,
    /// The object's own `apiVersion`/`kind` pair is a reference to rewrite.
    pub(crate) gvk: Option<Gvk>,
}

impl ObjNode {
    /// The child for member `key`, given as bytes.
    #[inline]
    pub(crate) fn child_bytes(&self, key: &[u8]) -> Option<&Node> {
        self.fields
            .iter()
            .find(|(k, _)| short_eq::eq(k.as_bytes(), key))
            .map(|(_, n)| n)
            .or(self.any.as_ref())
    }

    /// The child for member `key`.
    ///
    /// Not written as `child_bytes(key.as_bytes())`: the walk calls this once per member, and
    /// that form costs a LIST's restore 3% more instructions per byte (callgrind).
    #[inline]
    pub(crate) fn child(&self, key: &str) -> Option<&Node> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, n)| n)
            .or(self.any.as_ref())
    }
}

impl Node {
    fn obj() -> Node {
        Node::Obj(Box::default())
    }

    fn gvk(g: Gvk) -> Node {
        Node::Obj(Box::new(ObjNode {
            gvk: Some(g),
            ..ObjNode::default()
        }))
    }

    /// Adds `node` at `path` below `self`.
    pub(crate) fn insert(&mut self, path: &[Segment], node: Node) {
        let Some((first, rest)) = path.split_first() else {
            let old = std::mem::replace(self, Node::obj());
            *self = merge(old, node);
            return;
        };
        if let Node::Leaf(_) = self {
            return; // a whole-value leaf already covers this location
        }
        let Node::Obj(o) = self else { unreachable!() };
        let slot = match first {
            Segment::Wildcard => o.any.get_or_insert_with(Node::obj),
            Segment::Name(n) => {
                if let Some(i) = o.fields.iter().position(|(k, _)| k == n) {
                    &mut o.fields[i].1
                } else {
                    o.fields.push((n.clone(), Node::obj()));
                    &mut o.fields.last_mut().expect("just pushed").1
                }
            }
        };
        slot.insert(rest, node);
    }

    /// Follows one member name.
    pub(crate) fn step(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Obj(o) => o.child(key),
            Node::Leaf(_) => None,
        }
    }
}

fn merge(a: Node, b: Node) -> Node {
    match (a, b) {
        (Node::Obj(mut a), Node::Obj(b)) => {
            let b = *b;
            for (k, n) in b.fields {
                if let Some(i) = a.fields.iter().position(|(ak, _)| *ak == k) {
                    let old = std::mem::replace(&mut a.fields[i].1, Node::obj());
                    a.fields[i].1 = merge(old, n);
                } else {
                    a.fields.push((k, n));
                }
            }
            a.any = match (a.any.take(), b.any) {
                (Some(x), Some(y)) => Some(merge(x, y)),
                (x, y) => x.or(y),
            };
            a.gvk = a.gvk.or(b.gvk);
            Node::Obj(a)
        }
        (Node::Obj(a), leaf @ Node::Leaf(_)) if a.fields.is_empty() && a.any.is_none() && a.gvk.is_none() => {
            leaf
        }
        (a, _) => a,
    }
}

fn name(s: &str) -> Segment {
    Segment::Name(s.to_owned())
}

fn path(s: &str) -> Vec<Segment> {
    crate::rules::jsonpath::parse(s).expect("built-in locations are valid")
}

/// The node for one field type.
pub(crate) fn expand(ty: FieldType) -> Node {
    use FieldType as F;
    let mut n = Node::obj();
    match ty {
        F::Labels => return Node::Leaf(Leaf::Names(Which::Labels)),
        F::Annotations => return Node::Leaf(Leaf::Names(Which::Annotations)),
        F::Finalizers => return Node::Leaf(Leaf::NameList(Which::Finalizers)),
        F::LabelKey => return Node::Leaf(Leaf::Name(Which::Labels)),
        F::LabelKeys => return Node::Leaf(Leaf::NameList(Which::Labels)),
        F::ApiVersion => return Node::Leaf(Leaf::ApiVersion),
        F::ApiGroup => return Node::Leaf(Leaf::ApiGroup),
        F::ResourceAttributes => return Node::Leaf(Leaf::ResourceAttributes),
        F::Object => return Node::Leaf(Leaf::Embedded),
        F::ObjectRef => return Node::gvk(Gvk::ApiVersionKind),
        F::GroupKindRef => return Node::gvk(Gvk::ApiGroupKind),
        F::PolicyRules | F::AdmissionRules => n.insert(&[Segment::Wildcard], Node::Leaf(Leaf::PolicyRule)),
        F::Requirements => n.insert(&[Segment::Wildcard], Node::Leaf(Leaf::Requirement)),
        F::LabelSelector => {
            n.insert(&[name("matchLabels")], expand(F::Labels));
            n.insert(&[name("matchExpressions")], expand(F::Requirements));
        }
        F::Metadata => {
            n.insert(&[name("labels")], expand(F::Labels));
            n.insert(&[name("annotations")], expand(F::Annotations));
            n.insert(&[name("finalizers")], expand(F::Finalizers));
            n.insert(&path("$.ownerReferences[*]"), expand(F::ObjectRef));
        }
        F::Affinity => {
            let na = "$.nodeAffinity";
            n.insert(
                &path(&format!("{na}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[*].matchExpressions")),
                expand(F::Requirements),
            );
            n.insert(
                &path(&format!(
                    "{na}.preferredDuringSchedulingIgnoredDuringExecution[*].preference.matchExpressions"
                )),
                expand(F::Requirements),
            );
            for pa in ["podAffinity", "podAntiAffinity"] {
                let term = affinity_term();
                n.insert(
                    &path(&format!(
                        "$.{pa}.requiredDuringSchedulingIgnoredDuringExecution[*]"
                    )),
                    term.clone(),
                );
                n.insert(
                    &path(&format!(
                        "$.{pa}.preferredDuringSchedulingIgnoredDuringExecution[*].podAffinityTerm"
                    )),
                    term,
                );
            }
        }
        F::PodTemplate => {
            n.insert(&[name("metadata")], expand(F::Metadata));
            n.insert(&path("$.spec.nodeSelector"), expand(F::Labels));
            n.insert(&path("$.spec.affinity"), expand(F::Affinity));
            n.insert(&path("$.spec.tolerations[*].key"), expand(F::LabelKey));
            n.insert(
                &path("$.spec.topologySpreadConstraints[*].labelSelector"),
                expand(F::LabelSelector),
            );
            n.insert(
                &path("$.spec.topologySpreadConstraints[*].topologyKey"),
                expand(F::LabelKey),
            );
            n.insert(
                &path("$.spec.topologySpreadConstraints[*].matchLabelKeys"),
                expand(F::LabelKeys),
            );
        }
    }
    n
}

fn affinity_term() -> Node {
    let mut t = Node::obj();
    t.insert(&[name("labelSelector")], expand(FieldType::LabelSelector));
    t.insert(&[name("namespaceSelector")], expand(FieldType::LabelSelector));
    t.insert(&[name("topologyKey")], expand(FieldType::LabelKey));
    t.insert(&[name("matchLabelKeys")], expand(FieldType::LabelKeys));
    t.insert(&[name("mismatchLabelKeys")], expand(FieldType::LabelKeys));
    t
}

/// The `fieldsV1` plan mirroring an object plan: `f:`-prefixed members, names as keys.
fn fields_v1(n: &Node) -> Option<Node> {
    match n {
        Node::Leaf(Leaf::Names(w)) => Some(Node::Leaf(Leaf::FieldsKeys(*w))),
        Node::Leaf(Leaf::NameList(w)) => Some(Node::Leaf(Leaf::FieldsValues(*w))),
        Node::Leaf(_) => None,
        Node::Obj(o) => {
            let fields: Vec<_> = o
                .fields
                .iter()
                .filter(|(k, _)| k != "managedFields")
                .filter_map(|(k, c)| fields_v1(c).map(|c| (format!("f:{k}"), c)))
                .collect();
            (!fields.is_empty()).then(|| {
                Node::Obj(Box::new(ObjNode {
                    fields,
                    any: None,
                    gvk: None,
                }))
            })
        }
    }
}

/// The plan of a top-level object with kind-specific locations `extra`.
pub(crate) fn object_plan(extra: &[(Vec<Segment>, FieldType)]) -> Node {
    let mut root = Node::gvk(Gvk::ApiVersionKind);
    root.insert(&[name("metadata")], expand(FieldType::Metadata));
    for (p, ty) in extra {
        if p.is_empty() {
            root = merge(root, expand(*ty));
        } else {
            root.insert(p, expand(*ty));
        }
    }
    let mut mf = Node::obj();
    mf.insert(&[name("apiVersion")], Node::Leaf(Leaf::ApiVersion));
    if let Some(f) = fields_v1(&root) {
        mf.insert(&[name("fieldsV1")], f);
    }
    root.insert(&path("$.metadata.managedFields[*]"), mf);
    root
}

/// The groups a kind entry applies to (`None`: any).
type Groups = Option<Vec<String>>;

/// A field location and what lives there.
type Location = (Vec<Segment>, FieldType);

/// Compiled plans of every kind the rules know, plus the default one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plans {
    by_kind: crate::rules::names::FastMap<Vec<(Groups, Arc<Node>)>>,
    default: Arc<Node>,
}

impl Default for Node {
    fn default() -> Self {
        object_plan(&[])
    }
}

impl Plans {
    /// Compiles the rules' kind locations.
    pub(crate) fn compile(rules: &Rules) -> Plans {
        let mut by_kind: HashMap<String, Vec<(Groups, Vec<Location>)>> = HashMap::new();
        for k in &rules.kinds {
            for kind in &k.kinds {
                let entry = by_kind.entry(kind.clone()).or_default();
                if let Some(e) = entry.iter_mut().find(|(g, _)| *g == k.api_groups) {
                    e.1.extend(k.fields.iter().cloned());
                } else {
                    entry.push((k.api_groups.clone(), k.fields.clone()));
                }
            }
        }
        let by_kind = by_kind
            .into_iter()
            .map(|(kind, v)| {
                let plans = v
                    .into_iter()
                    .map(|(g, f)| (g, Arc::new(object_plan(&f))))
                    .collect();
                (kind, plans)
            })
            .collect();
        let mut plans = Plans {
            by_kind,
            default: Arc::new(object_plan(&[])),
        };
        // Kinds whose names depend on each other: built in code, not data.
        let mut crd = object_plan(&[]);
        crd.insert(&path("$.metadata.name"), Node::Leaf(Leaf::CrdName));
        crd.insert(&path("$.spec.group"), Node::Leaf(Leaf::CrdGroup));
        crd.insert(&path("$.spec.names"), Node::Leaf(Leaf::CrdNames));
        crd.insert(&path("$.status.acceptedNames"), Node::Leaf(Leaf::CrdNames));
        plans.set("apiextensions.k8s.io", "CustomResourceDefinition", crd);
        let mut review = object_plan(&[]);
        for f in ["object", "oldObject"] {
            review.insert(&[name("request"), name(f)], Node::Leaf(Leaf::Embedded));
        }
        for f in ["resource", "requestResource"] {
            review.insert(&[name("request"), name(f)], Node::Leaf(Leaf::ResourceAttributes));
        }
        for f in ["kind", "requestKind"] {
            review.insert(&[name("request"), name(f)], Node::Leaf(Leaf::GroupVersionKind));
        }
        review.insert(&path("$.response.patch"), Node::Leaf(Leaf::AdmissionPatch));
        plans.set("admission.k8s.io", "AdmissionReview", review);
        plans
    }

    fn set(&mut self, group: &str, kind: &str, node: Node) {
        self.by_kind
            .entry(kind.to_owned())
            .or_default()
            .insert(0, (Some(vec![group.to_owned()]), Arc::new(node)));
    }

    /// True when objects of `group`/`kind` have no locations beyond their metadata.
    pub(crate) fn is_metadata_only(&self, group: &str, kind: &str) -> bool {
        Arc::ptr_eq(self.get(group, kind), &self.default)
    }

    /// The plan for an object of (original) `group` and `kind`.
    pub(crate) fn get(&self, group: &str, kind: &str) -> &Arc<Node> {
        let Some(v) = self.by_kind.get(kind) else {
            return &self.default;
        };
        v.iter()
            .find(|(g, _)| g.as_ref().is_some_and(|g| g.iter().any(|x| x == group)))
            .or_else(|| v.iter().find(|(g, _)| g.is_none()))
            .map_or(&self.default, |(_, p)| p)
    }
}
