package observe

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Print writes a Result as a short table for the terminal.
func Print(w io.Writer, r Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{k}, a...)...) }
	fmt.Fprintf(tw, "rollout (%s), %.1f s observed\n", orDash(r.Backend), r.DurationS)
	row("requests", "%d (new %d, kept-alive %d, stream opens %d; %d stream lines, %d stream resets reopened, %d GETs retried after a reset)", r.Requests,
		r.RequestsByKind[Fresh], r.RequestsByKind[Kept], r.RequestsByKind[Stream], r.StreamLines, r.StreamInterruptions, r.RetriedRequests)
	row("failed requests", "%d (new %d, kept-alive %d, stream %d)", r.FailedRequests,
		r.FailedByKind[Fresh], r.FailedByKind[Kept], r.FailedByKind[Stream])
	row("max gap", "%.1f ms at +%.3fs (slowest answer: new %.0f ms, kept-alive %.0f ms)", r.MaxGapMS, r.MaxGapAtS,
		r.SlowestMSByKind[Fresh], r.SlowestMSByKind[Kept])
	for _, s := range r.MaxGapSamples {
		row("  in the gap", "%s", s)
	}
	row("replacements", "%d (p50 %.1f s, max %.1f s)", r.Replacements, r.ReplacementSecondsP50, r.ReplacementSecondsMax)
	row("hook held max", "%.1f s", r.HookHoldSecondsMax)
	row("dual owner max", "%s (%d holder samples)", msOrNA(r.DualOwnerMSMax), r.HolderSamples)
	row("no owner max", "%s", msOrNA(r.HolderLessMSMax))
	if r.SpuriousClaims != nil {
		row("spurious claims", "%d %v", len(r.SpuriousClaims), r.SpuriousClaims)
	}
	for _, k := range Kinds {
		for _, e := range r.FirstErrors[k] {
			row("error ("+string(k)+")", "%s", e)
		}
	}
	return tw.Flush()
}
