// situate's web page: the review queue's keys and live job progress. No framework.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  reviewKeys();
  liveJobs();
});

// j / k select the next or previous context; a accepts it, r rejects it, e puts the cursor
// in its text box (then Ctrl+Enter saves the edit).
function reviewKeys() {
  const items = Array.from(document.querySelectorAll("li.item"));
  if (items.length === 0 || document.body.dataset.role !== "admin") return;
  let at = 0;
  const select = (i) => {
    items[at].classList.remove("selected");
    at = Math.max(0, Math.min(items.length - 1, i));
    items[at].classList.add("selected");
    items[at].scrollIntoView({ block: "nearest" });
  };
  select(0);
  document.addEventListener("keydown", (ev) => {
    const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(ev.target.tagName);
    if (typing) {
      if (ev.key === "Enter" && ev.ctrlKey && ev.target.tagName === "TEXTAREA") {
        ev.preventDefault();
        ev.target.form.querySelector("button[value=edit]").click();
      }
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const form = items[at].querySelector("form.review");
    if (ev.key === "j") select(at + 1);
    else if (ev.key === "k") select(at - 1);
    else if (ev.key === "a" || ev.key === "r") form.querySelector(`button[data-key=${ev.key}]`).click();
    else if (ev.key === "e") { ev.preventDefault(); form.querySelector("textarea").focus(); }
  });
}

// Each running job's row follows its events until the job is over.
function liveJobs() {
  document.querySelectorAll("tr[data-job][data-final=false]").forEach((row) => {
    const events = new EventSource(`/v1/jobs/${encodeURIComponent(row.dataset.job)}/events`);
    const show = (msg) => {
      const job = JSON.parse(msg.data);
      row.querySelector(".state").textContent = job.state;
      const parts = Object.entries(job.progress).map(([stage, s]) =>
        s.total == null ? `${stage} ${s.done}` : `${stage} ${s.done}/${s.total}`);
      if (job.error) parts.push(`${job.error.code}: ${job.error.detail}`);
      row.querySelector(".progress").textContent = parts.join(" · ");
    };
    events.addEventListener("status", show);
    events.addEventListener("end", (msg) => { show(msg); row.dataset.final = "true"; events.close(); });
  });
}
