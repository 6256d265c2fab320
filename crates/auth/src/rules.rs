//! Scopes that prompts and resources need. Tools declare theirs next to them, in their
//! `_meta` (`required_scopes`); prompts and resources have no such declaration that the
//! transport can read before a request runs, so the server's author lists them here.

use std::collections::BTreeMap;

/// The scopes `prompts/get` of a prompt, and `resources/read` / `resources/subscribe` of a
/// resource, need (besides the endpoint's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopeRules {
    prompts: BTreeMap<String, Vec<String>>,
    resources: Vec<(String, Vec<String>)>,
}

impl ScopeRules {
    /// Prompt `name` needs `scopes`.
    pub fn prompt(mut self, name: impl Into<String>, scopes: &[&str]) -> Self {
        self.prompts
            .entry(name.into())
            .or_default()
            .extend(scopes.iter().map(|s| (*s).to_owned()));
        self
    }

    /// Every resource whose URI starts with `uri_prefix` needs `scopes`.
    pub fn resource(mut self, uri_prefix: impl Into<String>, scopes: &[&str]) -> Self {
        self.resources.push((
            uri_prefix.into(),
            scopes.iter().map(|s| (*s).to_owned()).collect(),
        ));
        self
    }

    /// The scopes prompt `name` needs.
    pub fn for_prompt(&self, name: &str) -> Vec<String> {
        self.prompts.get(name).cloned().unwrap_or_default()
    }

    /// The scopes resource `uri` needs: those of every prefix it starts with.
    pub fn for_resource(&self, uri: &str) -> Vec<String> {
        let mut scopes: Vec<String> = Vec::new();
        for (prefix, needed) in &self.resources {
            if uri.starts_with(prefix.as_str()) {
                for scope in needed {
                    if !scopes.contains(scope) {
                        scopes.push(scope.clone());
                    }
                }
            }
        }
        scopes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_and_resource_prefixes_name_their_scopes() {
        let rules = ScopeRules::default()
            .prompt("audit", &["audit:read"])
            .resource("file:///private/", &["files:read"])
            .resource("file:///private/keys/", &["keys:read"]);
        assert_eq!(rules.for_prompt("audit"), ["audit:read"]);
        assert!(rules.for_prompt("other").is_empty());
        assert_eq!(
            rules.for_resource("file:///private/keys/a"),
            ["files:read", "keys:read"]
        );
        assert_eq!(rules.for_resource("file:///private/x"), ["files:read"]);
        assert!(rules.for_resource("file:///public/x").is_empty());
    }
}
