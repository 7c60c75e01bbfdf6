"""The run report as one self-contained HTML file with interactive charts.

No network at view time: the styles, the data (JSON) and the plotting code (a few small SVG
chart functions written here) are all inline. Charts show values on hover; legends toggle
series; tables sort by clicking a header. ``document.body.dataset.rendered`` holds the number of
charts drawn and ``dataset.errors`` any script error, so a headless browser can check the page.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console

from mapp.errors import OutputError
from mapp.output import write_text
from mapp.report.summary import RunSummary, renderable
from mapp.sql.render import json_value

__all__ = ["render_html", "write_html", "CHARTS"]

CHARTS = ("iterations", "breakdown", "overlap", "skew", "bandwidth", "bubbles", "top-ops")
"""Chart ids; each is drawn into ``<div id="chart-ID">`` as an ``<svg>`` when it has data."""


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return [{k: json_value(v) for k, v in row.items()} for row in frame.to_dicts()]


def _verdict_text(verdict: Any) -> str | None:
    if verdict is None:
        return None
    console = Console(file=io.StringIO(), width=100, record=True, color_system=None)
    console.print(renderable(verdict))
    return console.export_text()


def _data(summary: RunSummary) -> dict[str, Any]:
    return {
        "bundle": {k: json_value(v) for k, v in summary.bundle.items()},
        "skip": summary.skip,
        "median_iteration_ns": summary.median_iteration_ns,
        "job_iterations": _rows(summary.job_iterations),
        "breakdown": _rows(summary.breakdown),
        "stages": _rows(summary.stages),
        "overlap": _rows(summary.overlap),
        "skew": _rows(summary.skew),
        "last_arrivers": _rows(summary.last_arrivers),
        "bandwidth": _rows(summary.bandwidth),
        "bubbles": _rows(summary.bubbles),
        "top_ops": _rows(summary.top_ops),
        "slowest_ops": _rows(summary.slowest_ops),
        "findings": _rows(summary.findings.filter(pl.col("severity") != "info")) if len(summary.findings) else [],
        "verdict": _verdict_text(summary.verdict),
        "verdict_json": json_value(summary.verdict.to_json()) if hasattr(summary.verdict, "to_json") else None,
        "notes": summary.notes,
    }


def render_html(summary: RunSummary) -> str:
    """The whole page as a string."""
    data = json.dumps(_data(summary), separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"mapp report: {summary.bundle.get('directory', '')}")
    return _PAGE.replace("@TITLE@", title).replace("@DATA@", data).replace("@STYLE@", _STYLE).replace("@SCRIPT@", _SCRIPT)


def write_html(summary: RunSummary, path: Path) -> Path:
    """Write the page to ``path`` atomically; ``OutputError`` if it cannot be written."""
    path = Path(path)
    text = render_html(summary)
    try:
        write_text(path, text)
    except OSError as error:
        raise OutputError(f"--html {path}: cannot write ({error.strerror})", "choose another path") from None
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@STYLE@</style>
</head>
<body>
<header><h1>mapp report</h1><div id="run"></div></header>
<main>
<section id="verdict-section" hidden><h2>Straggler verdict</h2><pre id="verdict"></pre></section>
<section><h2>Iteration time</h2><p class="note">The job's time per iteration (between consecutive iteration ends on the reference clock); hover a bar for its slowest rank.</p><div class="chart" id="chart-iterations"></div></section>
<section><h2>Where the time went</h2><p class="note">Per rank, inside the iteration windows: compute, communication not hidden behind compute, other events, idle. Click a legend entry to hide a series.</p><div class="chart" id="chart-breakdown"></div><div id="table-breakdown"></div></section>
<section><h2>Communication / computation overlap</h2><div class="chart" id="chart-overlap"></div></section>
<section><h2>Collective skew</h2><p class="note">Mean arrival spread (last member's start minus the first's) per group and op.</p><div class="chart" id="chart-skew"></div><div id="table-skew"></div><h3>Last arrivers</h3><div id="table-last"></div></section>
<section><h2>P2P bandwidth</h2><p class="note">Achieved GB/s per link, sender down, receiver across.</p><div class="chart" id="chart-bandwidth"></div></section>
<section><h2>Pipeline bubbles</h2><div class="chart" id="chart-bubbles"></div></section>
<section><h2>Top ops</h2><div class="chart" id="chart-top-ops"></div><h3>Slowest op instances</h3><div id="table-slowest"></div></section>
<section id="findings-section" hidden><h2>Communication problems</h2><div id="table-findings"></div></section>
</main>
<div id="tip" role="tooltip"></div>
<script type="application/json" id="mapp-data">@DATA@</script>
<script>@SCRIPT@</script>
</body>
</html>
"""

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:14px 28px}header h1{margin:0;font-size:20px}
#run{opacity:.85;margin-top:4px}main{padding:8px 28px 40px;max-width:1200px}
section{background:#fff;border-radius:8px;padding:12px 18px;margin:14px 0;box-shadow:0 1px 2px rgba(0,0,0,.08)}
h2{font-size:16px;margin:4px 0 8px}h3{font-size:14px;margin:14px 0 6px}.note{color:#5b6472;margin:0 0 8px}
.chart svg{display:block;max-width:100%;height:auto}.empty{color:#8a93a0;font-style:italic}
table{border-collapse:collapse;font-size:13px;margin-top:8px}th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #e6e8ec}
th{cursor:pointer;background:#f0f2f5;user-select:none}th:hover{background:#e2e6ec}td.t,th.t{text-align:left}
.legend{cursor:pointer}.legend.off{opacity:.35}
#tip{position:fixed;pointer-events:none;background:#1d2430;color:#fff;padding:4px 8px;border-radius:4px;font-size:12px;display:none;z-index:9;white-space:pre}
pre{background:#f0f2f5;padding:10px;overflow:auto}.bad{color:#c0392b;font-weight:600}
"""

_SCRIPT = r"""
(function(){
"use strict";
var errors=[];
window.addEventListener("error",function(e){errors.push(String(e.message));document.body.dataset.errors=errors.join(" | ");});
var D=JSON.parse(document.getElementById("mapp-data").textContent);
var NS="http://www.w3.org/2000/svg";
var COLORS={compute:"#2e9d5b",exposed:"#d9534f",other:"#4a78c2",idle:"#b8bec8",hidden:"#2e9d5b",bar:"#4a78c2"};
var tip=document.getElementById("tip");
function el(tag,attrs,parent){var n=document.createElementNS(NS,tag);for(var k in attrs){n.setAttribute(k,attrs[k]);}if(parent){parent.appendChild(n);}return n;}
function fmt(v,d){if(v===null||v===undefined){return "-";}if(Math.abs(v)>=100){return v.toFixed(0);}return v.toFixed(d===undefined?3:d);}
function ms(ns){return ns===null||ns===undefined?"-":fmt(ns/1e6)+" ms";}
function pct(f){return f===null||f===undefined?"-":(100*f).toFixed(1)+"%";}
function hover(node,text){node.addEventListener("mousemove",function(e){tip.textContent=text;tip.style.display="block";tip.style.left=(e.clientX+12)+"px";tip.style.top=(e.clientY+12)+"px";});node.addEventListener("mouseleave",function(){tip.style.display="none";});node.setAttribute("data-tip",text);}
function empty(id,text){var box=document.getElementById(id);var p=document.createElement("p");p.className="empty";p.textContent=text;box.appendChild(p);}
var drawn=0;
/* Bars: spec = {labels, series:[{name,values,color}], stacked, unit, fmt, labelWidth} drawn horizontally. */
function bars(id,spec){
  var box=document.getElementById(id);if(!spec.labels.length){empty(id,"no data");return;}
  var W=960,lw=spec.labelWidth||120,row=spec.labels.length>24?14:22,top=spec.series.length>1?28:8,H=top+row*spec.labels.length+24;
  var svg=el("svg",{viewBox:"0 0 "+W+" "+H,width:W,height:H,"class":"bars","data-chart":id},box);
  var hidden={};
  function draw(){
    while(svg.lastChild){svg.removeChild(svg.lastChild);}
    var max=0;spec.labels.forEach(function(_,i){var s=0;spec.series.forEach(function(se){if(hidden[se.name]){return;}var v=se.values[i]||0;s=spec.stacked?s+v:Math.max(s,v);});max=Math.max(max,s);});
    if(max<=0){max=1;}
    var scale=(W-lw-90)/max,bh=spec.stacked||spec.series.length===1?row-4:(row-4)/spec.series.length;
    if(spec.series.length>1){var x=lw;spec.series.forEach(function(se){var g=el("g",{"class":"legend"+(hidden[se.name]?" off":"")},svg);el("rect",{x:x,y:6,width:12,height:12,fill:se.color},g);var t=el("text",{x:x+16,y:17,"font-size":12},g);t.textContent=se.name;g.addEventListener("click",function(){hidden[se.name]=!hidden[se.name];draw();});x+=24+se.name.length*7.5;});}
    spec.labels.forEach(function(label,i){
      var y=top+i*row,t=el("text",{x:lw-6,y:y+row/2+4,"text-anchor":"end","font-size":row>16?12:10},svg);t.textContent=label;
      var x=lw,total=0;
      spec.series.forEach(function(se,k){if(hidden[se.name]){return;}var v=se.values[i]||0,w=Math.max(0,v*scale);
        var r=el("rect",{x:x,y:spec.stacked||spec.series.length===1?y+2:y+2+k*bh,width:w,height:bh,fill:se.color},svg);
        hover(r,label+"\n"+se.name+": "+(spec.fmt||fmt)(v));if(spec.stacked){x+=w;}total+=v;});
      if(spec.series.length===1){var v0=spec.series[0].values[i];var tv=el("text",{x:lw+(v0||0)*scale+4,y:y+row/2+4,"font-size":11,fill:"#5b6472"},svg);tv.textContent=(spec.fmt||fmt)(v0);}
    });
  }
  draw();drawn++;
}
/* Heatmap of a src x dst matrix. */
function heatmap(id,rows){
  var box=document.getElementById(id);if(!rows.length){empty(id,"no p2p messages");return;}
  var srcs=[],dsts=[];rows.forEach(function(r){if(srcs.indexOf(r.src)<0){srcs.push(r.src);}if(dsts.indexOf(r.dst)<0){dsts.push(r.dst);}});
  srcs.sort(function(a,b){return a-b;});dsts.sort(function(a,b){return a-b;});
  var c=Math.max(10,Math.min(36,Math.floor(840/Math.max(dsts.length,1)))),L=50,T=40,W=L+c*dsts.length+140,H=T+c*srcs.length+10;
  var svg=el("svg",{viewBox:"0 0 "+W+" "+H,width:W,height:H,"class":"heatmap","data-chart":id},box);
  var max=0;rows.forEach(function(r){max=Math.max(max,r.bandwidth_gbs||0);});
  dsts.forEach(function(d,j){if(c>=16||j%5===0){var t=el("text",{x:L+j*c+c/2,y:T-6,"text-anchor":"middle","font-size":10},svg);t.textContent=d;}});
  srcs.forEach(function(s,i){if(c>=16||i%5===0){var t=el("text",{x:L-6,y:T+i*c+c/2+4,"text-anchor":"end","font-size":10},svg);t.textContent=s;}});
  rows.forEach(function(r){var f=max>0?(r.bandwidth_gbs||0)/max:0,slow=r.vs_median!==null&&r.vs_median<0.8;
    var light=Math.round(92-55*f);var rect=el("rect",{x:L+dsts.indexOf(r.dst)*c,y:T+srcs.indexOf(r.src)*c,width:c-1,height:c-1,fill:slow?"hsl(4,70%,"+Math.max(light,45)+"%)":"hsl(215,60%,"+light+"%)","class":slow?"slow":"cell"},svg);
    hover(rect,r.src+" -> "+r.dst+": "+fmt(r.bandwidth_gbs,1)+" GB/s ("+fmt(r.vs_median,2)+"x median), "+r.messages+" messages");});
  var t=el("text",{x:L+c*dsts.length+12,y:T+12,"font-size":11},svg);t.textContent="max "+fmt(max,1)+" GB/s";
  var t2=el("text",{x:L+c*dsts.length+12,y:T+28,"font-size":11,fill:"#c0392b"},svg);t2.textContent="red: < 0.8x median";
  drawn++;
}
/* Sortable table: cols = [[key, title, formatter, isText]]. */
function table(id,rows,cols){
  var box=document.getElementById(id);if(!rows.length){return;}
  var t=document.createElement("table"),head=t.createTHead().insertRow(),body=t.createTBody(),dir={};
  function fill(){while(body.firstChild){body.removeChild(body.firstChild);}rows.forEach(function(r){var tr=body.insertRow();cols.forEach(function(c){var td=tr.insertCell();td.textContent=c[2]?c[2](r[c[0]],r):(r[c[0]]===null?"-":r[c[0]]);if(c[3]){td.className="t";}});});}
  cols.forEach(function(c){var th=document.createElement("th");th.textContent=c[1];if(c[3]){th.className="t";}th.addEventListener("click",function(){dir[c[0]]=-(dir[c[0]]||-1);rows.sort(function(a,b){var x=a[c[0]],y=b[c[0]];return (x===y?0:(x===null?-1:y===null?1:(x<y?-1:1)))*dir[c[0]];});fill();});head.appendChild(th);});
  fill();box.appendChild(t);
}
var b=D.bundle||{};
var layout=["tp","pp","dp","cp","ep"].filter(function(a){return b[a]&&(b[a]>1||a==="tp"||a==="pp"||a==="dp");}).map(function(a){return a.toUpperCase()+b[a];}).join(" x ");
document.getElementById("run").textContent=(b.directory||"")+" \u00b7 "+(b.format||"")+" \u00b7 "+b.traced_ranks+" of "+b.world_size+" ranks \u00b7 "+layout+(b.vpp>1?" (VPP"+b.vpp+")":"")+" \u00b7 "+(b.events||0).toLocaleString()+" events \u00b7 "+(b.aligned?"clocks aligned to rank "+b.reference_rank:"clocks not aligned")+(D.median_iteration_ns?" \u00b7 median iteration "+ms(D.median_iteration_ns):"");
if(D.verdict){document.getElementById("verdict-section").hidden=false;document.getElementById("verdict").textContent=D.verdict;}
bars("chart-iterations",{labels:D.job_iterations.map(function(r){return "iteration "+r.iteration;}),series:[{name:"job time (ms)",values:D.job_iterations.map(function(r){return r.time_ns/1e6;}),color:COLORS.bar}],fmt:function(v){return fmt(v)+" ms";}});
D.job_iterations.forEach(function(r,i){var n=document.querySelectorAll("#chart-iterations rect")[i];if(n){hover(n,"iteration "+r.iteration+": "+ms(r.time_ns)+"\nslowest rank "+r.slowest_rank+" ("+fmt(r.spread,3)+"x the fastest)");}});
var br=D.breakdown;
bars("chart-breakdown",{labels:br.map(function(r){return "rank "+r.rank+" (pp"+r.pp+")";}),stacked:true,labelWidth:110,
  series:[{name:"compute",values:br.map(function(r){return r.compute_frac;}),color:COLORS.compute},
          {name:"exposed comm",values:br.map(function(r){return r.exposed_comm_frac;}),color:COLORS.exposed},
          {name:"other",values:br.map(function(r){return r.other_ns/(r.window_ns||1);}),color:COLORS.other},
          {name:"idle",values:br.map(function(r){return r.idle_frac;}),color:COLORS.idle}],fmt:pct});
table("table-breakdown",br.slice(),[["rank","rank"],["pp","pp"],["tp","tp"],["dp","dp"],["window_ns","window",ms],["compute_frac","compute",pct],["exposed_comm_frac","exposed comm",pct],["idle_frac","idle",pct]]);
bars("chart-overlap",{labels:D.overlap.map(function(r){return r.kind;}),stacked:true,
  series:[{name:"hidden behind compute",values:D.overlap.map(function(r){return r.overlapped_ns/1e6;}),color:COLORS.hidden},
          {name:"exposed",values:D.overlap.map(function(r){return r.exposed_ns/1e6;}),color:COLORS.exposed}],fmt:function(v){return fmt(v)+" ms";}});
bars("chart-skew",{labels:D.skew.map(function(r){return r.group+" "+r.op;}),labelWidth:170,series:[{name:"mean arrival spread (ms)",values:D.skew.map(function(r){return r.mean_spread_ns/1e6;}),color:COLORS.exposed}],fmt:function(v){return fmt(v)+" ms";}});
table("table-skew",D.skew.slice(),[["group","group",null,true],["op","op",null,true],["instances","count"],["mean_spread_ns","mean spread",ms],["max_spread_ns","max spread",ms],["top_last_arriver","most often last"],["top_last_share","share",pct]]);
table("table-last",D.last_arrivers.slice(0,10),[["rank","rank"],["pp","pp"],["tp","tp"],["dp","dp"],["times_last","times last"],["collectives","of"],["caused_wait_ns","others waited",ms],["waited_ns","it waited",ms]]);
heatmap("chart-bandwidth",D.bandwidth);
bars("chart-bubbles",{labels:D.bubbles.map(function(r){return "stage "+r.pp;}),series:[{name:"bubble ratio",values:D.bubbles.map(function(r){return r.bubble_ratio;}),color:COLORS.idle}],fmt:pct});
bars("chart-top-ops",{labels:D.top_ops.map(function(r){return r.name;}),labelWidth:170,series:[{name:"total time (ms)",values:D.top_ops.map(function(r){return r.total_ns/1e6;}),color:COLORS.bar}],fmt:function(v){return fmt(v)+" ms";}});
table("table-slowest",D.slowest_ops.slice(),[["rank","rank"],["name","op",null,true],["iteration","iteration"],["microbatch","microbatch"],["dur_ns","duration",ms],["vs_median","vs median",function(v){return v===null?"-":fmt(v,2)+"x";}]]);
if(D.findings.length){document.getElementById("findings-section").hidden=false;table("table-findings",D.findings,[["severity","severity",null,true],["message","finding",null,true]]);}
document.body.dataset.rendered=String(drawn);
})();
"""
