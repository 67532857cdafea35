//! The MCP tool plane: the Streamable HTTP server, task tokens and the client executor.

pub mod client;
pub mod era;
pub mod jsonrpc;
pub mod server;
pub mod token;
mod tool_result;
mod transport;
