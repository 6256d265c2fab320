//! The Tasks extension on the wire: its name and a task's statuses.

/// The extension's name (2026-07-28), in capabilities and errors.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A task's status, as both task designs name it on the wire (and as task records keep it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The task's work runs.
    Working,
    /// The task waits for the client's answers.
    InputRequired,
    /// The task ended with its result.
    Completed,
    /// The task ended with an error.
    Failed,
    /// The task was cancelled.
    Cancelled,
}

impl TaskStatus {
    /// The wire name (`working`, `input_required`, `completed`, `failed`, `cancelled`).
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the status is final: a terminal status never changes (D10).
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod status_tests {
    use super::TaskStatus;

    #[test]
    fn statuses_have_their_wire_names() {
        for (status, name) in [
            (TaskStatus::Working, "working"),
            (TaskStatus::InputRequired, "input_required"),
            (TaskStatus::Completed, "completed"),
            (TaskStatus::Failed, "failed"),
            (TaskStatus::Cancelled, "cancelled"),
        ] {
            assert_eq!(status.as_str(), name);
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(name)
            );
            assert_eq!(
                serde_json::from_value::<TaskStatus>(serde_json::json!(name)).unwrap(),
                status
            );
        }
        assert!(!TaskStatus::Working.is_terminal() && !TaskStatus::InputRequired.is_terminal());
        assert!(
            TaskStatus::Completed.is_terminal()
                && TaskStatus::Failed.is_terminal()
                && TaskStatus::Cancelled.is_terminal()
        );
    }
}
