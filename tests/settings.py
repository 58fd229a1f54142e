"""Test-run knobs. JAXSCHED_EXAMPLES=200 (say) runs the property tests deeper than CI does."""

import os

EXAMPLES = int(os.environ.get("JAXSCHED_EXAMPLES", "25"))
