"""Stand-ins for the managed agent providers: loopback servers that speak the wire formats of the
OpenAI Agents API (`openai_agents`) and Claude Managed Agents (`anthropic_managed`) well enough for
the official SDKs, with a scripted remote agent (`remote_agent`), counters and fault hooks
(`common`). They let an example or a test run a managed executor with no real API configured; see
docs/executors.md."""
