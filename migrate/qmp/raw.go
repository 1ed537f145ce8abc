package qmp

import (
	"context"
	"encoding/json"
	"fmt"
)

// Raw runs a command given as QMP JSON, {"execute": NAME, "arguments":
// {...}}, and returns its return value as QEMU sent it: for operators and
// debugging, like virsh qemu-monitor-command. An "id" member is replaced by
// the Monitor's own; any other member is refused before anything is sent.
// A QMP error reply is returned as a wrapped *Error.
func (m *Monitor) Raw(ctx context.Context, cmd []byte) (json.RawMessage, error) {
	var in map[string]json.RawMessage
	if err := json.Unmarshal(cmd, &in); err != nil {
		return nil, fmt.Errorf("qmp raw: command is not a JSON object: %w", err)
	}
	var execute string
	if err := json.Unmarshal(in["execute"], &execute); err != nil || execute == "" {
		return nil, fmt.Errorf("qmp raw: command has no \"execute\" string")
	}
	for k := range in {
		switch k {
		case "execute", "arguments", "id":
		default:
			return nil, fmt.Errorf("qmp raw: unexpected member %q", k)
		}
	}
	args := in["arguments"]
	if args != nil && (len(args) == 0 || args[0] != '{') {
		return nil, fmt.Errorf("qmp raw: \"arguments\" is not an object")
	}
	ret, err := m.call(ctx, execute, args, nil)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", execute, err)
	}
	return ret, nil
}
