{ bench_floattostr — seed 002's loop in Free Pascal: threads that call
  FloatToStr and build strings, 1, 2, 8, 16 and 64 threads. The job is
  fixed (Iterations in all) and split evenly, so on C cores the ideal time
  from C threads on is the one-thread time divided by C. The CPU time of
  all threads together shows contention whatever else runs on the machine:
  ideally it stays at the one-thread figure. }
program bench_floattostr;

{$mode objfpc}{$H+}

uses
  {$ifdef MM_SHOAL} ShoalMM, {$endif}
  {$ifdef MM_CMEM} cmem, {$endif}
  {$ifdef unix} cthreads, UnixType, Linux, {$else} Windows, {$endif} SysUtils;

{$i benchutil.inc}

var
  Iterations: Int64;
  PerThread: Int64;
  Lengths: array[0..63] of Int64;

function Body(Arg: Pointer): PtrInt;
var
  i: Int64;
  s, Line: string;
  Total: Int64;
begin
  Line := '';
  Total := 0;
  for i := 1 to PerThread do
  begin
    s := FloatToStr(i * 1.31234);
    Line := Line + s + ';';
    if Length(Line) > 200 then
    begin
      Inc(Total, Length(Line));
      Line := '';
    end;
  end;
  Lengths[PtrUInt(Arg)] := Total;
  Result := 0;
end;

var
  t: Integer;
  Cpu: Int64;
begin
  Iterations := Scaled(1280000);
  for t := Low(ThreadCounts) to High(ThreadCounts) do
  begin
    PerThread := Iterations div ThreadCounts[t];
    Cpu := ProcessCpuMicroseconds;
    Report('floattostr', ThreadsText(ThreadCounts[t]), RunThreads(ThreadCounts[t], @Body));
    Report('floattostr', ThreadsText(ThreadCounts[t]) + ', CPU time of all threads',
      ProcessCpuMicroseconds - Cpu);
  end;
end.
