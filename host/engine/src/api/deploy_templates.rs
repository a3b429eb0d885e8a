//! `/v1/deploy_templates`: named sets of deploy steps, chosen by a node's traits.

use serde_json::json;

use super::App;
use super::http::error::ApiError;
use super::http::gate::TooOld;
use super::http::version::Version;
use super::resources::{Resource, missing, text};
use super::schema::{Field, Schema, Ty};
use super::steps::check_steps;
use super::traits::check_trait;
use crate::store::documents::Doc;

pub const DEPLOY_TEMPLATE: Resource = Resource {
    kind: "DeployTemplate",
    path: "deploy_templates",
    key: "deploy_templates",
    since: 55,
    patch_since: 55,
    schema: Schema {
        kind: "DeployTemplate",
        fields: &[
            Field::create("uuid", Ty::Uuid, 55),
            Field::rw("name", Ty::Text, 55),
            Field::rw("steps", Ty::Any, 55),
            Field::rw("extra", Ty::Map, 55),
            Field::ro("created_at", Ty::Text, 55),
            Field::ro("updated_at", Ty::Text, 55),
        ],
    },
    unique: &["name"],
    short: &["uuid", "name", "links"],
    filters: &[],
    sublinks: &[],
    check: |a, d, o, v| Box::pin(check_deploy_template(a, d, o, v)),
    on_create: None,
    on_delete: None,
    shown: None,
    of_node: None,
    too_old_writes: TooOld::NotAllowed,
};

async fn check_deploy_template(
    _: &App,
    doc: &mut Doc,
    _: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_trait(text(doc, "name").ok_or_else(|| missing("name"))?)?;
    check_steps(doc, "priority")?;
    doc.entry("extra").or_insert(json!({}));
    Ok(())
}
