//! A provisioning workflow on durable-mcp: reserve capacity, ask the user to confirm the
//! price, charge the card, boot, notify. It shows what a handler author writes:
//!
//! - every effect on another system is a [`Durable::step`], keyed with the step's
//!   idempotency key (the simulated inventory and payment systems deduplicate by it, as
//!   real ones do);
//! - the confirmation is a durable question ([`Durable::elicit`]): asked once, in any
//!   protocol era (a server-to-client request in a session, `input_required` in a
//!   stateless request, the task's `inputRequests` in a task);
//! - progress is durable too, and the boot wait is a durable timer;
//! - the tool declares optional task support, so clients that can use tasks get a durable
//!   task they can poll from any worker.
//!
//! Kill the worker at any point: another worker (or this one, restarted) finishes the
//! request, and `billing_report` shows each order was charged once.
//!
//! The inventory and payment systems here are in-process stand-ins (they forget on
//! restart); in a real deployment they are other services.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_mcp_handler::{Durable, TaskSupport, task_support};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    Implementation, ServerCapabilities, ServerConfig,
};
use rmcp::{ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Monthly price in cents of each size.
const PRICES: [(&str, u64); 3] = [("small", 500), ("medium", 2_000), ("large", 8_000)];

/// A stand-in for an external system that deduplicates by idempotency key.
#[derive(Default)]
struct Ledger {
    entries: Mutex<BTreeMap<String, String>>,
}

impl Ledger {
    /// Record an entry under `key` once, numbered by the ledger (`<label>-<number>`); a
    /// repeated key returns the first entry. The whole key is the identity: a prefix of an
    /// idempotency key is not unique (it begins with the run's creation time).
    fn once(&self, key: &str, label: &str) -> String {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let number = entries.len() + 1;
        entries
            .entry(key.to_owned())
            .or_insert_with(|| format!("{label}-{number}"))
            .clone()
    }

    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The provisioning server.
#[derive(Clone)]
pub struct Provisioning {
    inventory: Arc<Ledger>,
    payments: Arc<Ledger>,
    boot_time: Duration,
    tool_router: ToolRouter<Provisioning>,
}

impl Default for Provisioning {
    fn default() -> Self {
        Self::new(Duration::from_secs(2))
    }
}

/// Arguments of `provision_server`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ProvisionArgs {
    /// Where (for example `eu-west`).
    pub region: String,
    /// `small`, `medium` or `large`.
    pub size: String,
}

/// What `provision_server` returns.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Provisioned {
    /// The server's id.
    pub server_id: String,
    /// The inventory reservation.
    pub reservation: String,
    /// The payment receipt (absent if the user declined).
    pub receipt: Option<String>,
    /// `running` or `declined`.
    pub state: String,
}

fn confirmation(region: &str, size: &str, cents: u64) -> Result<ElicitRequestParams, McpError> {
    let schema: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": {"confirm": {"type": "boolean", "description": "Provision and charge"}},
        "required": ["confirm"]
    }))
    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "Provision a {size} server in {region} for ${}.{:02} a month?",
            cents / 100,
            cents % 100
        ),
        requested_schema: schema,
    })
}

#[tool_router]
impl Provisioning {
    /// A server whose simulated boot takes `boot_time`.
    pub fn new(boot_time: Duration) -> Self {
        Self {
            inventory: Arc::default(),
            payments: Arc::default(),
            boot_time,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Provision a server: reserve capacity, confirm the price with the user, charge, boot, notify. Durable: each effect happens once even if the worker dies.",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn provision_server(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<ProvisionArgs>,
    ) -> Result<CallToolResult, McpError> {
        let Some(cents) = PRICES
            .iter()
            .find(|(s, _)| *s == args.size)
            .map(|(_, c)| *c)
        else {
            return Err(McpError::invalid_params(
                format!("unknown size {:?}: small, medium or large", args.size),
                None,
            ));
        };
        let inventory = self.inventory.clone();
        let reservation: String = durable
            .step("reserve", |key| async move {
                inventory.once(key.idempotency_key(), "rsv")
            })
            .await?;
        durable
            .progress(1.0, Some(4.0), Some("capacity reserved"))
            .await?;

        let answer = durable
            .elicit(confirmation(&args.region, &args.size, cents)?)
            .await?;
        let confirmed = answer.action == ElicitationAction::Accept
            && answer
                .content
                .as_ref()
                .and_then(|c| c.get("confirm"))
                .and_then(|c| c.as_bool())
                == Some(true);
        if !confirmed {
            let inventory = self.inventory.clone();
            durable
                .step("release", |key| async move {
                    inventory.once(key.idempotency_key(), "released")
                })
                .await?;
            let result = Provisioned {
                server_id: String::new(),
                reservation,
                receipt: None,
                state: "declined".into(),
            };
            return Ok(structured(&result));
        }

        let payments = self.payments.clone();
        let receipt: String = durable
            .step("charge", |key| async move {
                payments.once(key.idempotency_key(), &format!("rcpt-{cents}"))
            })
            .await?;
        durable
            .progress(2.0, Some(4.0), Some("payment taken"))
            .await?;

        durable.sleep("boot", self.boot_time).await?;
        // A step's result is journaled: the random id drawn here is the same on a re-run.
        let server_id: String = durable
            .step("assign-id", |_| async {
                format!("srv-{:012x}", rand::random::<u64>() >> 16)
            })
            .await?;
        durable
            .progress(3.0, Some(4.0), Some("server running"))
            .await?;

        let notified = server_id.clone();
        durable
            .step("notify", |_| async move {
                tracing::info!(server_id = %notified, "provisioned; notifying the owner");
            })
            .await?;
        durable
            .progress(4.0, Some(4.0), Some("owner notified"))
            .await?;
        Ok(structured(&Provisioned {
            server_id,
            reservation,
            receipt: Some(receipt),
            state: "running".into(),
        }))
    }

    #[tool(
        description = "How many reservations and charges the (simulated) inventory and payment systems recorded"
    )]
    async fn billing_report(&self) -> CallToolResult {
        structured(&json!({"reservations": self.inventory.len(), "charges": self.payments.len()}))
    }
}

fn structured(value: &impl Serialize) -> CallToolResult {
    let value = serde_json::to_value(value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    result.structured_content = Some(value);
    result
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Provisioning {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new(
            "durable-mcp-provisioning",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Provision servers with provision_server; billing_report shows what was charged.",
        )
    }
}
