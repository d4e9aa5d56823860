"""The writing kit of the report: HTML pieces (:mod:`.html`), the two languages (:mod:`.i18n`),
matplotlib figures sized for the page (:mod:`.figures`) and the section type every part of the page
is written as (:mod:`.story`). Imports nothing else of attnkit, so experiments and the report can
both use it."""
