"""One study, many searchers: its storage (``storage``), the tickets searchers take (``tickets``), their heartbeats
and the study's lock (``sharing``), and which searcher writes the tuned file (``claim``); see
docs/search.md#sharing-one-study and docs/scale-out.md."""
