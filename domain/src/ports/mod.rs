//! Ports: the traits adapters implement and the engine drives. One file per port.

pub mod agent;
pub mod clock;
pub mod exec;
pub mod facade;
pub mod host;
pub mod ids;
pub mod locks;
pub mod operations;
pub mod repository;
pub mod service;
pub mod store;
pub mod template;
pub mod tools;

pub use agent::AgentProvider;
pub use agent::AgentRegistry;
pub use clock::Clock;
pub use exec::CommandExecutor;
pub use host::Host;
pub use ids::IdGenerator;
pub use locks::RunLocks;
pub use operations::Operations;
pub use repository::WorkflowRepository;
pub use service::RunService;
pub use store::EventLogReader;
pub use store::HistoryStore;
pub use store::StateStore;
pub use template::ExpressionEvaluator;
pub use template::Interpolator;
pub use tools::ToolAuditSink;
pub use tools::ToolProvider;
pub use tools::ToolProxies;

#[cfg(any(test, feature = "testing"))]
pub mod fakes;
