package linux_test

const envAgentChild = "PODFLOW_TEST_AGENT_CHILD"

func agentChild() int { return 2 }
